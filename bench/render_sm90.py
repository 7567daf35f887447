"""Markdown for a cuda_sm90_forward result (the Hopper forward's device job,
tools/dev/gpu-sm90.sh): per job, fastattn's sm90 path beside the same build's variants
(FASTATTN_CUDA_SM90_OVERLAP=0, FASTATTN_CUDA_PATH=sm80) and PyTorch SDPA's cuDNN and flash
backends, all timed in that job. render_performance.py puts the block into docs/performance.md
and the headline rows into the README. Python 3 standard library only.

The result holds `jobs`, each with `rows`: the device rows of `fastattn_cuda_bench hopper` (one
process per variant; `variant` absent = the default sm90 path) and of `sdpa_anchor.py hopper`.
From a job's bench.jsonl, a result of one job:

    python3 bench/render_sm90.py bench.jsonl --json OUT.json [--machine nvidia-h200]
        [--commit SHA] [--note TEXT]        # then tools/scripts/update-docs.sh OUT.json
"""
import argparse
import datetime
import json

from render_performance import fmt, table

VARIANTS = (None, "sm90-no-overlap", "sm80")  # None: the sm90 path as shipped


def shape_key(r):
    return (r["b"], r["h"], r["hkv"], r["sq"], r["sk"], r["d"], bool(r["causal"]))


def shape_label(r):
    heads = f"h{r['h']}" if r["h"] == r["hkv"] else f"h{r['h']}/{r['hkv']}"
    seq = f"s{r['sq']}" if r["sq"] == r["sk"] else f"sq{r['sq']} sk{r['sk']}"
    return f"b{r['b']} {heads} {seq} d{r['d']}"


def job_table(job):
    """{shape key: {"fastattn"|variant|"cudnn"|"flash": row}} in the order fastattn ran them."""
    shapes = {}
    for r in job.get("rows", []):
        if "ms" not in r or "b" not in r:
            continue  # the per-process device rows
        name = r["backend"] if r.get("source") == "sdpa" else (r.get("variant") or "fastattn")
        shapes.setdefault(shape_key(r), {})[name] = r
    return shapes


def newest_job(result):
    return result.get("jobs", [])[-1] if result.get("jobs") else {}


def _device_rows(job):
    return [r for r in job.get("rows", []) if r.get("kind") == "device"]


def _ratio(anchor, ours):
    return fmt(anchor["ms"] / ours["ms"], 2, "x") if anchor and ours else "-"


def _tflops(row):
    return fmt(row.get("tflops")) if row else "-"


def _job_block(job):
    dev = _device_rows(job)
    fast = next((r for r in dev if r.get("source") == "fastattn" and not r.get("variant")), {})
    sdpa = next((r for r in dev if r.get("source") == "sdpa"), {})
    lines = [f"#### {job.get('job', '?')}", "",
             f"- Commit: {job.get('commit', '?')}",
             f"- GPU: {fast.get('gpu', '?')} ({fast.get('sms', '?')} SMs, sm{fast.get('sm', '?')}); fastattn "
             f"{fast.get('fastattn_version', '?')} built for {', '.join(fast.get('cuda_archs_compiled', [])) or '?'}; "
             f"PyTorch {sdpa.get('torch', '?')} (CUDA {sdpa.get('cuda', '?')}, cuDNN {sdpa.get('cudnn', '?')})"]
    if job.get("note"):
        lines.append(f"- Note: {job['note']}")
    lines.append("")
    rows = []
    for key, by in job_table(job).items():
        ours = by.get("fastattn")
        any_row = next(iter(by.values()))
        rows.append([shape_label(any_row), "yes" if key[-1] else "no",
                     fmt(ours["ms"], 3) if ours else "-", _tflops(ours),
                     _tflops(by.get("sm90-no-overlap")), _tflops(by.get("sm80")),
                     _tflops(by.get("cudnn")), _tflops(by.get("flash")),
                     _ratio(by.get("cudnn"), ours), _ratio(by.get("flash"), ours),
                     _ratio(by.get("sm80"), ours), f"`{ours.get('kernel', '')}`" if ours else "-"])
    lines += [table(["shape (bf16)", "causal", "sm90 ms", "sm90 TFLOP/s", "sm90 no-overlap", "sm80 path",
                     "SDPA cuDNN", "SDPA flash", "vs cuDNN", "vs flash", "vs sm80 path", "sm90 kernel"],
                    rows, right=tuple(range(2, 11))), ""]
    return lines


def render_cuda_sm90_forward(result):
    ctx = result.get("context", {})
    jobs = result.get("jobs", [])
    timing = next((r.get("timing") for r in _device_rows(newest_job(result)) if r.get("timing")), {}) or {}
    out = [f"### CUDA sm90 (Hopper) forward on {result['machine']}", "",
           f"- Date (UTC): {ctx.get('timestamp_utc', '?')} (the newest measurement in the file)",
           f"- What: {result.get('what', '?')}",
           f"- Job script: `{result.get('script', '?')}`; commands: "
           + "; ".join(f"`{c}`" for c in result.get("commands", [])),
           f"- Timing: {timing.get('method', '?')}, {timing.get('warmup', '?')} warm-up calls, median of "
           f">= {timing.get('min_repeats', '?')} calls; TFLOP/s columns are each variant's or anchor's own; "
           "ratios are the other's time / the sm90 path's time (> 1: the sm90 path faster)",
           f"- {len(jobs)} job(s), the newest first; each job's commit and note say what it ran", ""]
    for job in reversed(jobs):
        out += _job_block(job)
    return "\n".join(out).rstrip()


# The README rows: the FA2-paper headline shape (non-causal and causal) and the range over every
# shape of the newest job, so the worst shape is named too.
HEADLINE = ((2, 16, 16, 8192, 8192, 128, False), (2, 16, 16, 8192, 8192, 128, True))


def readme_rows_cuda_sm90_forward(result):
    job = newest_job(result)
    shapes = job_table(job)
    gpu = next((r.get("gpu") for r in _device_rows(job) if r.get("gpu")), result["machine"])
    rows = []
    for key in HEADLINE:
        by = shapes.get(key, {})
        ours, cudnn, flash, sm80 = by.get("fastattn"), by.get("cudnn"), by.get("flash"), by.get("sm80")
        if not ours or not cudnn:
            continue
        name = f"CUDA forward bf16 {shape_label(ours)}{' causal' if key[-1] else ''}, sm90 path"
        anchors = [f"cuDNN {fmt(cudnn['tflops'], 0)}"]
        if flash:
            anchors.append(f"PyTorch SDPA flash {fmt(flash['tflops'], 0)}")
        if sm80:
            anchors.append(f"fastattn's sm80 path {fmt(sm80['tflops'], 0)}")
        rows.append([name, gpu, f"{fmt(ours['tflops'], 0)} TFLOP/s ({_ratio(cudnn, ours)} cuDNN's speed)",
                     ", ".join(anchors) + " TFLOP/s"])
    ratios = [(by["cudnn"]["ms"] / by["fastattn"]["ms"], shape_label(by["fastattn"]) + (" causal" if k[-1] else ""))
              for k, by in shapes.items() if "fastattn" in by and "cudnn" in by]
    if ratios:
        lo, hi = min(ratios), max(ratios)
        rows.append([f"CUDA forward, sm90 path, all {len(ratios)} shapes of the job", gpu,
                     f"{lo[0]:.2f}–{hi[0]:.2f}x cuDNN's speed", f"slowest vs cuDNN: {lo[1]}"])
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", help="bench.jsonl of tools/dev/gpu-sm90.sh")
    p.add_argument("--json", help="write the result (kind cuda_sm90_forward) here")
    p.add_argument("--machine", default="nvidia-h200")
    p.add_argument("--commit", default="?")
    p.add_argument("--note", default="")
    args = p.parse_args()
    rows = [json.loads(line) for line in open(args.rows) if line.startswith("{")]
    stamps = [r["timestamp_utc"] for r in rows if r.get("timestamp_utc")]
    stamp = max(stamps) if stamps else datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    job = {"job": f"tools/dev/gpu-sm90.sh, {stamp}", "commit": args.commit, "rows": rows}
    if args.note:
        job["note"] = args.note
    result = {"kind": "cuda_sm90_forward", "machine": args.machine, "context": {"timestamp_utc": stamp},
              "what": "sm90 (Hopper) forward, bf16, forward TFLOP/s (flash-attn convention), fastattn's sm90 path, "
                      "the same build with FASTATTN_CUDA_SM90_OVERLAP=0 (variant sm90-no-overlap) and with "
                      "FASTATTN_CUDA_PATH=sm80 (variant sm80), beside PyTorch SDPA's cuDNN and flash backends, "
                      "one process per tool in one job",
              "commands": ["fastattn_cuda_bench hopper", "FASTATTN_CUDA_SM90_OVERLAP=0 fastattn_cuda_bench hopper",
                           "FASTATTN_CUDA_PATH=sm80 fastattn_cuda_bench hopper",
                           "python3 bench/cuda/sdpa_anchor.py hopper --backends cudnn,flash --no-gemm"],
              "script": "tools/dev/gpu-sm90.sh", "jobs": [job]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(render_cuda_sm90_forward(result))


if __name__ == "__main__":
    main()
