"""Markdown for a cuda_bench result (bench/cuda/compare.py's JSON): the block that
render_performance.py puts into docs/performance.md. Python 3 standard library only."""
from render_performance import fmt, table


def _ratio(c, anchor):
    value = c["speedup"].get(anchor)
    return fmt(value, 2, "x") if value is not None else "-"


def _anchor_tflops(c, anchor):
    a = c["anchors"].get(anchor, {})
    if "tflops" in a:
        return fmt(a["tflops"], 0)
    return "skip" if "skipped" in a else ("err" if "error" in a else "-")


def _header(result):
    ctx = result.get("context", {})
    dev, sdpa = ctx.get("fastattn_device", {}), ctx.get("sdpa_device", {})
    lines = [f"### CUDA on {result['machine']} ({result.get('sweep', '?')} sweep)", "",
             f"- Date (UTC): {ctx.get('timestamp_utc', '?')}",
             f"- GPU: {ctx.get('gpu', '?')} ({dev.get('sms', '?')} SMs, sm{dev.get('sm', '?')}); "
             f"fastattn {dev.get('fastattn_version', '?')} built for "
             f"{', '.join(dev.get('cuda_archs_compiled', [])) or '?'}; PyTorch {sdpa.get('torch', '?')} "
             f"(CUDA {sdpa.get('cuda', '?')}, cuDNN {sdpa.get('cudnn', '?')})",
             f"- Modes: {', '.join(ctx.get('modes', []))}; commands: `tools/dev/run_device.sh` "
             "(cuda_bench and sdpa_anchor.py in the same job)",
             f"- Measured in the same job: bf16 GEMM 8192^3 {fmt(ctx.get('gemm_peak_tflops'), 0)} TFLOP/s; "
             f"device-to-device copy {fmt(ctx.get('copy_bandwidth_gbs'), 0)} GB/s (read + write)",
             "- Timing: CUDA events around each call, 3 warm-up calls, median of >= 20 back-to-back "
             "calls (>= 5 where a row would exceed a few seconds); FLOPs as flash-attn's benchmark "
             "(forward 4·b·h·sq·sk·d, halved for causal; backward 2.5x, forward+backward 3.5x); "
             "ratios are anchor time / fastattn time (> 1: fastattn faster)", ""]
    if dev.get("env_FASTATTN_CUDA_NUM_SPLITS"):
        lines.insert(-1, f"- FASTATTN_CUDA_NUM_SPLITS={dev['env_FASTATTN_CUDA_NUM_SPLITS']}")
    return lines


def _bars(result):
    rows = []
    for b in result.get("bars", []):
        unit = b.get("unit", "")
        target = "-" if b.get("target") is None else f"{b.get('comparison', '>=')} {b['target']:g} {unit}"
        measured = b.get("measured")
        rows.append([b["name"], b["description"],
                     fmt(measured, 2, " " + unit) if isinstance(measured, float) else
                     ("-" if measured is None else f"{measured} {unit}"),
                     target, f"**{b['status']}**", b.get("detail", "")])
    return [table(["bar", "what", "measured", "target", "result", "detail"], rows, right=(2, 3)), ""]


def _comparisons(result):
    rows = []
    for c in result.get("comparisons", []):
        if c["tag"] in ("splitkv", "splitkv_nosplit", "long"):
            continue
        if c.get("error"):
            rows.append([c["label"], "yes" if c["causal"] else "no", c["pass"], "error", "-",
                         "-", "-", "-", "-", "-", "-", "-", c["error"][:80]])
            continue
        rows.append([c["label"] + (" (seqpar)" if c["tag"] == "seqpar" else ""),
                     "yes" if c["causal"] else "no", c["pass"], fmt(c["fastattn_ms"], 3),
                     fmt(c["fastattn_tflops"], 0)] +
                    [_anchor_tflops(c, a) for a in ("flash", "cudnn", "efficient", "math")] +
                    [_ratio(c, a) for a in ("flash", "cudnn", "math")] + [c.get("kernel") or ""])
    if not rows:
        return []
    return ["Every timed shape (bf16; TFLOP/s; SDPA columns are PyTorch's backends on the same shape):", "",
            table(["shape", "causal", "pass", "fastattn ms", "fastattn", "flash", "cuDNN", "efficient",
                   "math", "vs flash", "vs cuDNN", "vs math", "kernel"], rows,
                  right=tuple(range(3, 12))), ""]


def _splitkv(result):
    hbm = result.get("context", {}).get("copy_bandwidth_gbs")
    by_key = {(c["sq"], c["pass"]): c for c in result.get("comparisons", []) if c["tag"] == "splitkv"}
    rows = []
    for r in result.get("splitkv", []):
        variant = "FASTATTN_CUDA_NUM_SPLITS=1" if r["tag"] == "splitkv_nosplit" else "default"
        if r.get("error"):
            rows.append([r["sq"], variant, "error", "-", "-", "-", "-", r["error"][:80]])
            continue
        c = by_key.get((r["sq"], r["pass"]), {"anchors": {}})
        anchor = [fmt(c["anchors"].get(a, {}).get("kv_gbs"), 0) for a in ("flash", "cudnn")]
        rows.append([r["sq"], variant, fmt(r["ms"], 4), fmt(r["kv_gbs"], 0),
                     fmt(100 * r["kv_gbs"] / hbm, 1) if hbm else "-"] + anchor +
                    [r.get("kernel_describe") or r.get("kernel", "")])
    if not rows:
        return []
    return ["Split-KV decode (b1 h32/32 sk65536 d128, forward; GB/s of K+V):", "",
            table(["seqlen_q", "splits", "ms", "GB/s", "% of copy bw", "flash GB/s", "cuDNN GB/s",
                   "kernel"], rows, right=(0, 2, 3, 4, 5, 6)), ""]


def _long(result):
    by_key = {(c["sq"], c["pass"]): c for c in result.get("comparisons", []) if c["tag"] == "long"}
    rows = []
    for r in result.get("long", []):
        c = by_key.get((r["sq"], r["pass"]), {"speedup": {}, "anchors": {}})
        if r.get("error"):
            rows.append([r["sq"], r["pass"], "error", "-", "-", "-", "-", "-", r["error"][:80]])
            continue
        needed = r["tensor_bytes"] + max(r.get("scratch_bytes") or 0, 0)
        rows.append([r["sq"], r["pass"], fmt(r["ms"], 1), fmt(r["tflops"], 0),
                     fmt(r["tensor_bytes"] / 2**20, 0), fmt((r.get("scratch_bytes") or 0) / 2**20, 1),
                     fmt(needed / r["sq"] / 1024, 1), _ratio(c, "flash"), r.get("kernel", "")])
    if not rows:
        return []
    return ["Long sequences (b1 h16 d128 causal; memory: tensors the call reads and writes, scratch "
            "from the device pool's high-water mark):", "",
            table(["seqlen", "pass", "ms", "TFLOP/s", "tensors MiB", "scratch MiB", "KiB / token",
                   "vs flash", "kernel"], rows, right=(0, 2, 3, 4, 5, 6, 7)), ""]


def _determinism(result):
    rows = []
    for r in result.get("determinism", []):
        label = f"b{r['b']} h{r['h']}/{r['hkv']} s{r['sq']} d{r['d']}{' causal' if r['causal'] else ''}"
        if r.get("error"):
            rows.append([label, "error", "-", "-", "-", r["error"][:80]])
            continue
        rows.append([label, "yes" if r.get("equal") else "**no**", fmt(r.get("deterministic_ms"), 3),
                     fmt(r.get("default_ms"), 3), fmt(r.get("slowdown"), 2, "x"),
                     "default repeatable too" if r.get("default_equal") else ""])
    if not rows:
        return []
    return ["Deterministic backward (run twice, dq/dk/dv compared bitwise):", "",
            table(["shape", "bitwise equal", "deterministic ms", "default ms", "slowdown", "note"],
                  rows, right=(2, 3, 4)), ""]


def render_cuda_bench(result):
    out = _header(result) + _bars(result) + _comparisons(result) + _splitkv(result)
    out += _long(result) + _determinism(result)
    return "\n".join(out)
