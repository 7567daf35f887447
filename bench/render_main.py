#!/usr/bin/env python3
"""The main job's summary: fastattn beside the anchors measured in the same run, as one table,
one JSON and one plot. Called by tools/scripts/run-main.sh; writes only into DIR.

    python3 bench/render_main.py DIR [--cpu CPU.json] [--cuda CUDA.json] [--machine NAME] [--quick]

CPU.json is bench_cpu's JSON (fastattn and the standard-attention baseline on OpenBLAS, same
run); CUDA.json is bench/cuda/compare.py's (cuda_bench beside PyTorch SDPA's backends, same
job). Ratios are anchor time / fastattn time: > 1 means fastattn is faster. Writes DIR/main.json
and, when matplotlib imports, DIR/main.png. Bars that miss are listed, not fatal: exit status
0 unless an input cannot be read.
"""
import argparse
import datetime
import json
import math
import pathlib
import sys

from render_performance import table  # the same markdown tables as docs/performance.md

CUDA_ANCHORS = ("flash", "cudnn", "efficient")


def fmt(value, digits=1):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}"


def cpu_rows(result):
    """One row per (shape, mask, pass): fastattn's and the baseline's times, same run."""
    rows, by_key = [], {}
    for r in result.get("runs", []):
        s = r["shape"]
        k = (s["label"], bool(s.get("causal")), r["pass"])
        if k not in by_key:
            by_key[k] = {"device": "cpu", "shape": s["label"], "causal": bool(s.get("causal")),
                         "pass": r["pass"], "unit": "GFLOP/s", "anchors": {}}
            rows.append(by_key[k])
        row = by_key[k]
        if r.get("impl", "fastattn") == "fastattn":
            row.update(fastattn_ms=r["median_s"] * 1e3, fastattn=r.get("gflops"),
                       kernel=r.get("kernel", {}).get("kernel"))
        else:
            row["anchors"]["standard"] = {"ms": r["median_s"] * 1e3, "value": r.get("gflops")}
    for row in rows:
        a = row["anchors"].get("standard")
        row["ratio"] = {"standard": a["ms"] / row["fastattn_ms"]} if a and row.get("fastattn_ms") else {}
    return rows


def cuda_rows(result):
    rows = []
    for c in result.get("comparisons", []):
        row = {"device": "cuda", "shape": c["label"] + " bf16", "causal": bool(c["causal"]),
               "pass": c["pass"], "unit": "TFLOP/s", "fastattn_ms": c.get("fastattn_ms"),
               "fastattn": c.get("fastattn_tflops"), "kernel": c.get("kernel"),
               "error": c.get("error"), "anchors": {}, "ratio": {}}
        for name in CUDA_ANCHORS:
            a = c.get("anchors", {}).get(name, {})
            if "ms" in a:
                row["anchors"][name] = {"ms": a["ms"], "value": a.get("tflops")}
                if name in c.get("speedup", {}):
                    row["ratio"][name] = c["speedup"][name]
            elif a:
                row["anchors"][name] = {"note": (a.get("error") or a.get("skipped") or "")[:80]}
        rows.append(row)
    return rows


def print_cpu(rows):
    out = [table(["shape", "mask", "pass", "fastattn ms", "fastattn GFLOP/s", "standard ms",
                  "standard GFLOP/s", "standard time / fastattn time"],
                 [[r["shape"], "causal" if r["causal"] else "none", r["pass"],
                   fmt(r.get("fastattn_ms"), 2), fmt(r.get("fastattn")),
                   fmt(r["anchors"].get("standard", {}).get("ms"), 2),
                   fmt(r["anchors"].get("standard", {}).get("value")),
                   fmt(r["ratio"].get("standard"), 2) + ("x" if "standard" in r["ratio"] else "")]
                  for r in rows], right=(3, 4, 5, 6, 7))]
    return "\n".join(out)


def print_cuda(rows):
    body = []
    for r in rows:
        if r.get("error"):
            body.append([r["shape"], "yes" if r["causal"] else "no", r["pass"], "error: " + r["error"][:60]]
                        + ["-"] * 7)
            continue
        anchors = [fmt(r["anchors"].get(a, {}).get("value"), 0) if "value" in r["anchors"].get(a, {})
                   else ("n/a" if a in r["anchors"] else "-") for a in CUDA_ANCHORS]
        ratios = [fmt(r["ratio"][a], 2) + "x" if a in r["ratio"] else "-" for a in CUDA_ANCHORS]
        body.append([r["shape"], "yes" if r["causal"] else "no", r["pass"], fmt(r["fastattn_ms"], 3),
                     fmt(r["fastattn"], 0)] + anchors + ratios)
    return table(["shape", "causal", "pass", "fastattn ms", "fastattn TFLOP/s", "SDPA flash",
                  "SDPA cuDNN", "SDPA efficient", "vs flash", "vs cuDNN", "vs efficient"], body,
                 right=tuple(range(3, 11)))


def plot(path, sections, title):
    """Grouped bars: fastattn and each anchor per shape, one panel per device."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (the JSON has every number)"
    panels = [(device, rows) for device, rows in sections if rows]
    if not panels:
        return "nothing to plot"
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 4.5 * len(panels)), squeeze=False)
    for ax, (device, rows) in zip(axes[:, 0], panels):
        names = ["fastattn"] + sorted({a for r in rows for a, v in r["anchors"].items() if "value" in v})
        width = 0.8 / len(names)
        labels = [f"{r['shape']}\n{'causal ' if r['causal'] else ''}{r['pass']}" for r in rows]
        for i, name in enumerate(names):
            values = [(r.get("fastattn") if name == "fastattn" else
                       r["anchors"].get(name, {}).get("value")) or 0 for r in rows]
            ax.bar([x + i * width for x in range(len(rows))], values, width, label=name)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))])
        ax.set_xticklabels(labels, fontsize=7, rotation=30, ha="right")
        ax.set_ylabel(rows[0]["unit"])
        ax.set_title(f"{device.upper()}: fastattn and anchors measured in the same run")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=pathlib.Path)
    p.add_argument("--cpu", type=pathlib.Path)
    p.add_argument("--cuda", type=pathlib.Path)
    p.add_argument("--machine", default="")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()

    summary = {"kind": "main", "machine": args.machine, "quick": args.quick,
               "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "ratio": "anchor time / fastattn time (> 1: fastattn faster)",
               "inputs": {}, "rows": [], "bars": []}
    sections, text = [], []
    for device, path, rows_of, printer in (("cpu", args.cpu, cpu_rows, print_cpu),
                                           ("cuda", args.cuda, cuda_rows, print_cuda)):
        if not path:
            continue
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"render_main: cannot read {path}: {e}", file=sys.stderr)
            return 1
        summary["inputs"][device] = path.name
        rows = rows_of(result)
        summary["rows"] += rows
        summary["bars"] += [dict(b, device=device) for b in result.get("bars", [])]
        sections.append((device, rows))
        if device == "cpu":
            text.append(f"## CPU: {result.get('machine', '?')}, {result.get('threads', '?')} threads"
                        f"{' (quick: small shapes, few repeats)' if args.quick else ''}; "
                        "baseline: standard attention on OpenBLAS, same run\n")
        else:
            ctx = result.get("context", {})
            torch = ctx.get("sdpa_device", {}).get("torch")
            text.append(f"## CUDA: {ctx.get('gpu', '?')}; anchors: PyTorch "
                        f"{torch + ' SDPA, same job' if torch else 'SDPA not run (no torch)'}\n")
        text.append(printer(rows) + "\n")

    misses = [b for b in summary["bars"] if b.get("status") in ("FAIL", "ERROR", "error", "fail")]
    if summary["bars"]:
        text.append("Bars: " + ", ".join(f"{b['device']}:{b['name']} {b['status']}" for b in summary["bars"]))
    if misses:
        text.append(f"{len(misses)} bar(s) missed (reported, not a failure of the main job"
                    f"{'; quick runs use small shapes' if args.quick else ''}).")
    args.dir.mkdir(parents=True, exist_ok=True)
    (args.dir / "main.json").write_text(json.dumps(summary, indent=1) + "\n")
    problem = plot(args.dir / "main.png", sections,
                   f"fastattn main job on {args.machine or '?'}{' (quick)' if args.quick else ''}")
    print("\n".join(text))
    print(f"wrote {args.dir / 'main.json'}")
    print(f"plot: {problem}" if problem else f"wrote {args.dir / 'main.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
