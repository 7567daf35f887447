#!/usr/bin/env python3
"""Issue 17's CUDA decode measurements as markdown: the rows of `fastattn_kv_cache_bench` and
`bench/cuda/sdpa_anchor.py kv_decode kv_multitoken`, measured in the same job (joined on tag,
b, sq, sk, h, hkv, d).

    python3 bench/render_kv_decode.py ROWS.jsonl|RESULT.json [--json OUT.json] [--machine nvidia-h200]

Tables: forward() decode on a contiguous cache (GB/s of K+V, % of the device-to-device copy
bandwidth measured in the job, ratios to SDPA cuDNN and flash), the KV-cache kernel on paged
caches against the contiguous one, multi-token decode against cuDNN.
"""
import argparse
import datetime
import json


def key(r):
    return (r["tag"], r["b"], r["sq"], r["sk"], r["h"], r["hkv"], r["d"])


def render(rows):
    hbm = max((r.get("gbs", 0) for r in rows if r.get("kind") in ("hbm", "hbm_best")), default=0)
    ours = [r for r in rows if r.get("source") == "fastattn" and "tag" in r and r.get("repeat", 1) == 1]
    again = {key(r): r for r in rows if r.get("source") == "fastattn" and r.get("repeat") == 2 and "ms" in r}
    sdpa = {}
    for r in rows:
        if r.get("source") == "sdpa" and "ms" in r:
            sdpa[key(r) + (r["backend"],)] = r["ms"]
    lines = [f"Device-to-device copy bandwidth in the same job: {hbm:.0f} GB/s (bytes read + written). "
             "GB/s counts the K+V bytes once.", ""]

    def ratio(other, ms):
        return f"{other / ms:.2f}x" if other else "-"

    def anchored(r):
        """' ms | GB/s | % of copy | cuDNN ms | flash ms | vs cuDNN | vs flash |' of a row."""
        cudnn, flash = sdpa.get(key(r) + ("cudnn",)), sdpa.get(key(r) + ("flash",))
        frac = 100 * r["kv_gbs"] / hbm if hbm else 0
        return (f" {r['ms']:.4f} | {r['kv_gbs']:.0f} | {frac:.0f} | {cudnn or 0:.4f} | {flash or 0:.4f} | "
                f"{ratio(cudnn, r['ms'])} | {ratio(flash, r['ms'])} |")

    # The second timing of each row (mode decode2) only where the run has one.
    lines += ["One query token, causal, contiguous cache, through forward():", "",
              "| heads q/kv | batch | kv | fastattn ms | K+V GB/s | % of copy | cuDNN ms | flash ms "
              "| vs cuDNN | vs flash |" + (" 2nd run ms |" if again else "") + " kernel |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if again else "") + "---|"]
    for r in sorted((r for r in ours if r["tag"] == "kv_decode"), key=lambda r: (r["h"], r["hkv"], r["b"], r["sk"])):
        head = f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k |"
        if "ms" not in r:
            lines.append(head + f" {r.get('skipped') or r.get('error', '?')} |" + " |" * (8 if again else 7))
            continue
        second = (f" {again[key(r)]['ms']:.4f} |" if key(r) in again else " - |") if again else ""
        lines.append(head + anchored(r) + f"{second} `{r.get('kernel', '')}` |")

    # forward() with FASTATTN_CUDA_KV_LOAD=cp_async beside the default: the loads' A/B (in the job
    # where TMA was the default; cp.async is now).
    cp = {key(r)[1:]: r for r in ours if r["tag"] == "kv_decode_cpasync" and "ms" in r}
    if cp:
        lines += ["", "The same decode rows with cp.async loads (FASTATTN_CUDA_KV_LOAD=cp_async) beside the "
                  "default above:", "", "| heads q/kv | batch | kv | default ms | cp.async ms | cp.async time / "
                  "default time | cp.async vs cuDNN | default kernel |", "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in sorted((r for r in ours if r["tag"] == "kv_decode" and "ms" in r),
                        key=lambda r: (r["h"], r["hkv"], r["b"], r["sk"])):
            c = cp.get(key(r)[1:])
            if c is None:
                continue
            cudnn = sdpa.get(key(r) + ("cudnn",))
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {r['ms']:.4f} | {c['ms']:.4f} | "
                         f"{c['ms'] / r['ms']:.3f} | {ratio(cudnn, c['ms'])} | `{r.get('kernel', '')}` |")

    loads = [r for r in ours if r["tag"] == "kv_loads" and "ms" in r]
    if loads:
        lines += ["", "TMA against cp.async loads (the kernel alone; pages shuffled through the block table):", "",
                  "| heads q/kv | batch | kv | page size | loads | stages | ms | K+V GB/s | kernel |",
                  "|---|---:|---:|---:|---|---:|---:|---:|---|"]
        for r in loads:
            size = "contiguous" if r["page_size"] == 0 else str(r["page_size"])
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {size} | {r.get('load')} | "
                         f"{r.get('stages')} | {r['ms']:.4f} | {r['kv_gbs']:.0f} | `{r['kernel']}` |")

    graph = [r for r in ours if r["tag"] == "kv_graph" and "ms" in r]
    if graph:
        lines += ["", "b1 decode replayed from a CUDA graph (20 calls captured back to back, as a decode loop "
                  "replays its steps; time per call; fastattn: a KV-cache plan's run on a contiguous cache, "
                  "SDPA: the same call captured with torch.cuda.graph):", "",
                  "| heads q/kv | batch | kv | fastattn ms | K+V GB/s | % of copy | cuDNN ms | flash ms | vs cuDNN "
                  "| vs flash | kernel |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in sorted(graph, key=lambda r: (r["h"], r["hkv"], r["sk"])):
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k |" + anchored(r) +
                         f" `{r.get('kernel', '')}` |")

    floor = [r for r in ours if r["tag"] == "kv_floor" and "ms" in r]
    if floor:
        lines += ["", "The floor under one call (CUDA events around each call, as every row here): an empty kernel "
                  "on the b1 grid (16 x 8 CTAs), then forward() on b1 GQA 32/8 with one 64-key tile per CTA:", "",
                  "| what | ms | kernel |", "|---|---:|---|"]
        for r in floor:
            what = r.get("variant") or f"forward() b1 kv {r['sk']}"
            lines.append(f"| {what} | {r['ms']:.4f} | `{r.get('kernel', '')}` |")

    paged = [r for r in ours if r["tag"] == "kv_paged" and "ms" in r]
    if paged:
        lines += ["", "Paged caches (the kernel alone, pages shuffled through the block table; the contiguous "
                  "row is the same kernel without a table):", "", "| heads q/kv | batch | kv | page size | ms | K+V GB/s | vs contiguous | kernel |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in sorted(paged, key=lambda r: (r["b"], r["sk"], r["page_size"])):
            base = next((c for c in paged if c["page_size"] == 0 and key(c) == key(r)), None)
            rel = f"{base['ms'] / r['ms']:.2f}x" if base else "-"
            size = "contiguous" if r["page_size"] == 0 else str(r["page_size"])
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {size} | {r['ms']:.4f} | "
                         f"{r['kv_gbs']:.0f} | {rel} | `{r['kernel']}` |")

    multi = [r for r in ours if r["tag"] == "kv_multitoken" and "ms" in r]
    if multi:
        lines += ["", "Multi-token decode through forward(), causal (SDPA timed unmasked: its causal mask is "
                  "top-left aligned; the same work):", "", "| seqlen_q | batch | kv | fastattn ms | K+V GB/s | cuDNN ms | vs cuDNN | flash ms | vs flash "
                  "| kernel |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in sorted(multi, key=lambda r: r["sq"]):
            cudnn, flash = sdpa.get(key(r) + ("cudnn",)), sdpa.get(key(r) + ("flash",))
            lines.append(f"| {r['sq']} | {r['b']} | {r['sk'] // 1024}k | {r['ms']:.4f} | {r['kv_gbs']:.0f} | "
                         f"{cudnn or 0:.4f} | {ratio(cudnn, r['ms'])} | {flash or 0:.4f} | {ratio(flash, r['ms'])} "
                         f"| `{r.get('kernel', '')}` |")
    # One table per kernel knob the bench swept (the kernel alone): its value per row.
    for tag, knob, intro in (
            ("kv_stages", "stages", "Ring depth of the 16-row tile (the kernel alone):"),
            ("kv_splits", "splits", "Split counts (the kernel alone, contiguous cache; per shape the heuristic's own "
                                    "choice at the time of the run first, then 1 to 64 forced with "
                                    "FASTATTN_CUDA_NUM_SPLITS):")):
        swept = [r for r in ours if r["tag"] == tag and "ms" in r]
        if swept:
            lines += ["", intro, "", f"| heads q/kv | batch | kv | {knob} | ms | K+V GB/s | kernel |",
                      "|---|---:|---:|---:|---:|---:|---|"]
            for r in swept:
                lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {r.get(knob)} | {r['ms']:.4f} | "
                             f"{r['kv_gbs']:.0f} | `{r['kernel']}` |")
    host = [r for r in ours if r["tag"] == "kv_host" and "host_us" in r]
    if host:
        lines += ["", "Host time per call (enqueue only for the plan's run and forward(); the eager KV-cache call "
                  "to completion, as it reads seqlens back), bar: the plan's run <= 10 us:", "",
                  "| heads q/kv | batch | kv | call | host us | kernel |", "|---|---:|---:|---|---:|---|"]
        for r in host:
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {r['what']} | {r['host_us']:.2f} | "
                         f"`{r.get('kernel', '')}` |")
    combine = [r for r in ours if r["tag"] == "kv_combine" and "ms" in r]
    if combine:
        lines += ["", "Merging the splits (the kernel alone, contiguous cache): the combine kernel, the fused "
                  "combine as an eager call runs it (a memset of its counters per call) and as a plan's run does:", "",
                  "| heads q/kv | batch | kv | splits | combine | ms | K+V GB/s | kernel |",
                  "|---|---:|---:|---:|---|---:|---:|---|"]
        for r in combine:
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {r.get('splits')} | "
                         f"{r.get('combine')} | {r['ms']:.4f} | {r['kv_gbs']:.0f} | `{r['kernel']}` |")
    return "\n".join(lines)


def render_cuda_kv_decode(result):
    """The docs/performance.md block of a saved result (kind cuda_kv_decode)."""
    ctx = result.get("context", {})
    rows = result["rows"]
    dev = next((r for r in rows if r.get("kind") == "device" and r.get("source") == "fastattn"), {})
    sdpa = next((r for r in rows if r.get("kind") == "device" and r.get("source") == "sdpa"), {})
    head = [f"### CUDA KV-cache decode on {result['machine']}", "",
            f"- Date (UTC): {ctx.get('timestamp_utc', '?')}",
            f"- Command: `{ctx.get('command', '?')}` (`{' '.join(dev.get('command', ['?'])).split('/')[-1]}`"
            + (f" and `{' '.join(sdpa['command'])}`" if sdpa.get("command") else "") + ", same job)",
            f"- GPU: {dev.get('gpu', '?')} ({dev.get('sms', '?')} SMs); fastattn {dev.get('fastattn_version', '?')}"
            + (f"; PyTorch {sdpa.get('torch', '?')} (cuDNN {sdpa.get('cudnn', '?')})" if sdpa else ""),
            "- bf16, d 128; ratios are the anchor's time / fastattn's time (> 1: fastattn faster). Since this "
            "kernel landed, forward() runs padded calls with seqlen_q <= 16 on it (the `cuda_decode` block "
            "measured the kernels before it). Design and the issue's bars: "
            "docs/inference-cuda-decode.md", ""]
    return "\n".join(head) + "\n" + render(rows)


def decode_rows(rows):
    """(fastattn row, cuDNN ms, flash ms) of every measured one-token contiguous decode shape."""
    sdpa = {key(r) + (r["backend"],): r["ms"] for r in rows if r.get("source") == "sdpa" and "ms" in r}
    return [(r, sdpa.get(key(r) + ("cudnn",)), sdpa.get(key(r) + ("flash",))) for r in rows
            if r.get("source") == "fastattn" and r.get("tag") == "kv_decode" and r.get("repeat", 1) == 1
            and "ms" in r]


def readme_rows_cuda_kv_decode(result):
    """The README's decode rows: the largest GQA 32/8 batch-16 shape, and the range over every
    decode shape of the run against cuDNN."""
    rows = result["rows"]
    gpu = next((r.get("gpu") for r in rows if r.get("gpu")), result["machine"])
    hbm = max((r.get("gbs", 0) for r in rows if r.get("kind") in ("hbm", "hbm_best")), default=0)
    measured = decode_rows(rows)
    out = []
    pick = [m for m in measured if (m[0]["h"], m[0]["hkv"], m[0]["b"]) == (32, 8, 16) and m[1]]
    if pick:
        r, cudnn, flash = max(pick, key=lambda m: m[0]["sk"])
        copy = f", {100 * r['kv_gbs'] / hbm:.0f}% of the {hbm:.0f} GB/s copy" if hbm else ""
        out.append([f"CUDA decode bf16 d128 GQA 32/8 b{r['b']} kv {r['sk'] // 1024}k, KV-cache kernel", gpu,
                    f"{r['ms']:.4f} ms, {r['kv_gbs']:.0f} GB/s of K+V{copy}",
                    f"cuDNN {cudnn:.4f} ms ({cudnn / r['ms']:.2f}x)"
                    + (f", PyTorch SDPA flash {flash:.4f} ms ({flash / r['ms']:.2f}x)" if flash else "")])
    with_cudnn = [(c / r["ms"], r) for r, c, _ in measured if c]
    if with_cudnn:
        lo, hi = min(with_cudnn, key=lambda v: v[0]), max(with_cudnn, key=lambda v: v[0])
        out.append([f"CUDA decode, all {len(with_cudnn)} one-token shapes of the run", gpu,
                    f"{lo[0]:.2f}–{hi[0]:.2f}x cuDNN's speed",
                    f"slowest vs cuDNN: h{lo[1]['h']}/{lo[1]['hkv']} b{lo[1]['b']} kv {lo[1]['sk'] // 1024}k"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows")
    p.add_argument("--json", help="write the result (kind cuda_kv_decode) here")
    p.add_argument("--machine", default="nvidia-h200")
    p.add_argument("--command", default="bash tools/dev/gpu-kvcache.sh")
    args = p.parse_args()
    text = open(args.rows).read()
    try:  # a saved result (bench/results/*kv_decode*.json) or the job's JSON lines
        rows = json.loads(text)["rows"]
    except (ValueError, KeyError, TypeError):
        rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    if args.json:
        result = {"kind": "cuda_kv_decode", "machine": args.machine, "rows": rows,
                  "context": {"timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                              "command": args.command}}
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(render(rows))


if __name__ == "__main__":
    main()
