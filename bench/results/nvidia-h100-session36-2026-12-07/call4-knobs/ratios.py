#!/usr/bin/env python3
"""Call 4's per-row ratios to cuDNN: each build x variant, the mean of its two rounds' TFLOP/s
over SDPA cuDNN's of the same job. Usage: python3 ratios.py sweep.json > ratios.txt"""
import json
import sys

shapes = json.load(open(sys.argv[1]))["shapes"]  # gpu-sm90-ab.sh's sweep.json
variants = ["def", "grid", "dyn", "wave", "pair", "wgo0"]
for build in ("base", "skip"):
    print(f"build {build}; columns {' '.join(variants)}: mean of r1, r2 over cuDNN")
    for row in shapes:
        t = row["tflops"]
        cells = []
        for v in variants:
            got = [t.get(f"sm90-{build}.{v}-r{i}") for i in (1, 2)]
            got = [x for x in got if x]
            cells.append(f"{sum(got) / len(got) / t['cudnn']:.3f}" if got else "  -  ")
        print(f"{row['shape']:<28} cudnn {t['cudnn']:.0f}: " + " ".join(cells))
