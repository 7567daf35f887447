#!/usr/bin/env python3
"""The A/B table of a gpu-kv-ab.sh call (or a directory laid out like it: <variant>.<setting>.r<k>.jsonl
rows of fastattn_kv_cache_bench, anchor.jsonl of sdpa_anchor.py): per bench row, the best of the
rounds of each <variant>.<setting> (each round a median of >= 20 timed calls), beside cuDNN from
the same call, as time and cuDNN time / fastattn time.

    python3 tools/dev/kv_ab_table.py DIR
"""
import glob
import json
import os
import statistics
import sys


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def main(directory):
    cudnn = {}
    anchor = os.path.join(directory, "anchor.jsonl")
    if os.path.exists(anchor):
        for r in rows(anchor):
            if r.get("source") == "sdpa" and r.get("backend") == "cudnn" and "ms" in r:
                cudnn[(r["tag"], r["h"], r["hkv"], r["b"], r["sk"])] = r["ms"]
    times, copy = {}, {}
    for path in sorted(glob.glob(os.path.join(directory, "*.r*.jsonl"))):
        variant, setting, _ = os.path.basename(path)[: -len(".jsonl")].rsplit(".", 2)  # names may hold dots
        column = f"{variant}.{setting}"
        for r in rows(path):
            if r.get("kind") == "hbm":
                copy.setdefault(column, []).append(r["gbs"])
            elif r.get("source") == "fastattn" and r.get("ms"):
                row = (r.get("tag"), r.get("h"), r.get("hkv"), r.get("b"), r.get("sk"), r.get("page_size", ""))
                times.setdefault(row, {}).setdefault(column, []).append(r["ms"])
    columns = sorted({c for by_column in times.values() for c in by_column})
    print("device-to-device copy GB/s:", {c: round(statistics.mean(v)) for c, v in copy.items()})
    print("%-40s %8s " % ("row (tag, h, hkv, b, sk, page)", "cuDNN") + " ".join("%16s" % c for c in columns))
    for row, by_column in times.items():
        anchor_ms = cudnn.get(row[:5])
        cells = []
        for c in columns:
            if c not in by_column:
                cells.append("%16s" % "-")
                continue
            ms = min(by_column[c])
            cells.append("%8.4f %s" % (ms, "%5.3fx" % (anchor_ms / ms) if anchor_ms else "      "))
        print("%-40s %8s " % (str(row), "%.4f" % anchor_ms if anchor_ms else "-") + " ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1])
