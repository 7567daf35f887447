#!/usr/bin/env python3
"""check-doc-links.py — every relative link in the tracked Markdown files names a file that exists
and, where it has a #fragment into a Markdown file, a heading of that file (GitHub's anchors:
lower case, punctuation but '-' and '_' dropped, spaces to '-', '-1', '-2', ... on repeats).

    python3 tools/scripts/check-doc-links.py          # exit 1 and one line per broken link

Links to the web and links inside code blocks and inline code are not checked.
"""
import bisect
import functools
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


def unfenced_lines(path):
    """(number, line) of the file's lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def prose_lines(path):
    """unfenced_lines with inline code blanked."""
    for number, line in unfenced_lines(path):
        yield number, re.sub(r"`[^`]*`", "``", line)


@functools.lru_cache(maxsize=None)
def anchors(path):
    seen, found = {}, set()
    for _, line in unfenced_lines(path):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    files = subprocess.run(["git", "-C", root, "ls-files", "*.md"], capture_output=True, text=True,
                           check=True).stdout.split()
    broken = 0
    for rel in files:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        # The prose as one text (a link's text may run over lines), each line's start offset
        # mapped back to its number.
        numbered = list(prose_lines(path))
        starts, offset = [], 0
        for _, line in numbered:
            starts.append(offset)
            offset += len(line)
        text = "".join(line for _, line in numbered)
        for match in LINK.finditer(text):
            target = match.group(1)
            number = numbered[bisect.bisect_right(starts, match.start()) - 1][0]
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
