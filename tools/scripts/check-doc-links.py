#!/usr/bin/env python3
"""check-doc-links.py — every relative link in the tracked Markdown files names a file that exists
and, where it has a #fragment into a Markdown file, a heading of that file (GitHub's anchors:
lower case, punctuation but '-' and '_' dropped, spaces to '-', '-1', '-2', ... on repeats).

    python3 tools/scripts/check-doc-links.py          # exit 1 and one line per broken link

Links to the web and links inside code blocks and inline code are not checked.
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+(?:\([^()]*\))?[^()\s]*)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(text):
    text = re.sub(r"`([^`]*)`", r"\1", text)                       # inline code keeps its text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)            # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                           # \w keeps letters, digits, '_'
    return text.replace(" ", "-")


def prose_lines(path):
    """The file's lines outside fenced code blocks, with inline code blanked."""
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "``", line)


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        fenced = False
        for line in open(path, encoding="utf-8"):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            m = None if fenced else HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    files = subprocess.run(["git", "-C", root, "ls-files", "*.md"], capture_output=True, text=True,
                           check=True).stdout.split()
    broken = 0
    for rel in files:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        for number, line in prose_lines(path):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, fragment = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if not os.path.exists(dest):
                    print(f"{rel}:{number}: no file {file_part}")
                    broken += 1
                elif fragment and dest.endswith(".md") and fragment.lower() not in anchors(dest):
                    print(f"{rel}:{number}: no heading #{fragment} in {os.path.relpath(dest, root)}")
                    broken += 1
    print(f"check-doc-links: {len(files)} files, {broken} broken links", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
