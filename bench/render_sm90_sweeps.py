"""Markdown for the Hopper bar sweeps (issues 15 and 16): a `cuda_sm90_sweep` result (the
forward sweep of bench/cuda/sweep_sm90.py) and a `cuda_sm90_backward` result (the backward
summary of tools/dev/sm90_bwd_summary.py), each wrapped with kind, machine, job, and
context.timestamp_utc so tools/scripts/update-docs.sh picks the newest per machine.
render_performance.py calls these. Python 3 standard library only.

    python3 bench/render_sm90_sweeps.py wrap SUMMARY.json --kind cuda_sm90_backward \
        --machine nvidia-h200 --job "..." --timestamp 2026-12-01T21:35:00Z --out RESULT.json
"""
import argparse
import json

from render_performance import fmt, table


def _header(result, title):
    return [f"### {title} on {result.get('machine', '?')}", "",
            f"- Date (UTC): {result.get('context', {}).get('timestamp_utc', '?')}",
            f"- Job: {result.get('job', '?')}",
            f"- Commit: {result.get('commit', '?')}", ""]


def render_cuda_sm90_sweep(result):
    """The forward sweep: TFLOP/s per shape and variant, ratio to cuDNN, and the bars."""
    variants = [v for v in result.get("variants", {}) if v not in ("cudnn", "flash")]
    lines = _header(result, "Hopper forward bar sweep (issue 15)")
    lines += [f"- {name}: {what}" for name, what in result.get("variants", {}).items()]
    if result.get("note"):
        lines.append(f"- Note: {result['note']}")
    lines.append("")
    headers = ["shape", "causal"] + [f"{v} TFLOP/s" for v in variants] + ["cuDNN", "flash"] + [f"{v} / cuDNN" for v in variants]
    rows = []
    for s in result.get("shapes", []):
        t, r = s.get("tflops", {}), s.get("ratio_vs_cudnn", {})
        rows.append([s["shape"], "yes" if s.get("causal") else "no"] + [fmt(t.get(v), 0) for v in variants] +
                    [fmt(t.get("cudnn"), 0), fmt(t.get("flash"), 0)] + [fmt(r.get(v), 2) + "x" for v in variants])
    lines.append(table(headers, rows, right=tuple(range(2, len(headers)))))
    lines.append("")
    bar_rows = []
    for v in variants:
        sm = result.get("summary", {}).get(v, {})
        met = sm.get("bars_met", {})
        bar_rows.append([v, f"{fmt(sm.get('geomean_s_ge_2k'), 3)}x", f"{fmt(sm.get('min_s_ge_2k'), 3)}x",
                         f"{fmt(sm.get('min_s512_1k'), 3)}x", f"{fmt(sm.get('b1_h16_s32k_d128'), 3)}x",
                         ", ".join(k for k, ok in met.items() if ok) or "none"])
    lines.append(table(["variant", "geomean s >= 2k (bar 1.05x)", "min s >= 2k (bar 0.97x)",
                        "min s512/1k (bar 0.90x)", "s32k (bar 1.0x)", "bars met"], bar_rows, right=(1, 2, 3, 4)))
    return "\n".join(lines)


def render_cuda_sm90_backward(result):
    """The backward sweep: per shape ms of each variant and cuDNN, the ratios, A/B, the bars."""
    lines = _header(result, "Hopper backward sweep (issue 16)")
    shapes = result.get("shapes", [])
    variants = []
    for s in shapes:
        for v in s.get("ms", {}):
            if v not in variants and v not in ("cudnn", "flash"):
                variants.append(v)
    headers = ["shape"] + [f"{v} ms" for v in variants] + ["cuDNN ms", "flash ms"] + [f"{v} / cuDNN" for v in variants]
    rows = []
    for s in shapes:
        ms, r = s.get("ms", {}), s.get("vs_cudnn", {})
        rows.append([s["shape"]] + [fmt(ms.get(v), 3) for v in variants] + [fmt(ms.get("cudnn"), 3), fmt(ms.get("flash"), 3)] +
                    [fmt(r.get(v), 2) + "x" for v in variants])
    lines.append(table(headers, rows, right=tuple(range(1, len(headers)))))
    lines.append("")
    ratio_rows = []
    for v, by in result.get("ratios", {}).items():
        for what, x in by.items():
            if x is None:  # a variant or pass this job did not time
                continue
            ratio_rows.append([v, what, x.get("rows"), f"{fmt(x.get('geomean'), 3)}x", f"{fmt(x.get('min'), 3)}x", x.get("min_shape", "")])
    lines.append(table(["variant", "rows", "n", "geomean vs cuDNN", "min", "min at"], ratio_rows, right=(2, 3, 4)))
    lines.append("")
    ab_rows = [[k, x.get("rows"), f"{fmt(x.get('geomean'), 3)}x", f"{fmt(x.get('min'), 3)}x", f"{fmt(x.get('max'), 3)}x"]
               for k, x in result.get("ab", {}).items()]
    lines.append(table(["A/B (speed ratio)", "rows", "geomean", "min", "max"], ab_rows, right=(1, 2, 3, 4)))
    det = result.get("determinism", {}).get("rows", [])
    if det:
        lines.append("")
        lines.append(table(["deterministic backward", "bitwise equal over the runs", "speed vs default"],
                           [[f"b{d['b']} h{d['h']}/{d['hkv']} s{d.get('sq', d.get('s', '?'))} d{d['d']}"
                             f"{' causal' if d.get('causal') else ''}", "yes" if d.get("equal") else "NO",
                             f"{fmt(d['default_ms'] / d['deterministic_ms'], 3)}x"] for d in det], right=(2,)))
    mem = result.get("memory", {}).get("rows", [])
    if mem:
        lines.append("")
        lines.append(table(["backward memory, seqlen", "tensors + scratch bytes per token"],
                           [[m["sq"], fmt(m["bytes_per_token"], 0)] for m in mem], right=(0, 1)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wrap", help="wrap a summary JSON as a result update-docs.sh renders")
    w.add_argument("summary")
    w.add_argument("--kind", required=True, choices=("cuda_sm90_sweep", "cuda_sm90_backward"))
    w.add_argument("--machine", required=True)
    w.add_argument("--job", required=True)
    w.add_argument("--timestamp", required=True)
    w.add_argument("--commit", default="?")
    w.add_argument("--out", required=True)
    a = ap.parse_args()
    r = json.load(open(a.summary))
    r.update({"kind": a.kind, "machine": a.machine, "job": a.job, "commit": r.get("commit", a.commit)})
    r.setdefault("context", {})["timestamp_utc"] = a.timestamp
    json.dump(r, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
