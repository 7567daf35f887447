"""Time PyTorch scaled_dot_product_attention with each backend (flash, cuDNN, efficient, math)
on the shapes of cuda_bench's modes, forward and forward+backward, in the same job, plus the
bf16 GEMM ceiling. One JSON object per line on stdout; compare.py joins them with cuda_bench's.

    python3 bench/cuda/sdpa_anchor.py MODE [MODE ...] [--backends flash,cudnn,efficient,math]
        [--repeats 20] [--max-seconds 6] [--no-gemm] [--warm-ms 0]

Timing is the same as cuda_bench's: 3 warm-up calls, then >= 20 calls enqueued back to back,
each between two CUDA events, one synchronisation, the median (fewer calls, at least 5, only
where a row would take more than --max-seconds; 1 warm-up call and ~1.5 s for math and for the
long mode's rows). FLOPs follow flash-attn's benchmark: forward
4 * b * h * sq * sk * d (halved for causal), forward + backward 3.5x. Tensors use SDPA's own
layout [b, h, s, d], contiguous. The math backend materialises the b * h * sq * sk scores; it
runs only where an estimate of its memory fits in the free device memory, and a skipped row
says why.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
PAPER_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)


def paper(seqlens):
    return [("paper", 16384 // s, s, s, 2048 // d, 2048 // d, d, causal)
            for d in (64, 128) for causal in (False, True) for s in seqlens]


# (tag, b, sq, sk, h, hkv, d, causal) per mode and the passes timed; mirrors points_for() and
# the pass defaults in cuda_bench.cpp.
MODES = {
    "paper": (paper(PAPER_SEQLENS), ("fwd", "fwdbwd")),
    "short": (paper((2048, 8192)), ("fwd", "fwdbwd")),
    "seqpar": ([("seqpar", 1, 32768, 32768, 16, 16, d, False) for d in (64, 128)], ("fwd", "fwdbwd")),
    "splitkv": ([("splitkv", 1, sq, 65536, 32, 32, 128, False) for sq in (1, 4, 16)], ("fwd",)),
    # One query token over a contiguous cache, GQA 32/8, MHA 32/32, GQA 64/8; K+V up to 4.5 GB
    # (as in cuda_bench.cpp, whose tensors are filled on the host).
    "decode": ([("decode", b, 1, sk, h, hkv, 128, True)
                for h, hkv in ((32, 8), (32, 32), (64, 8)) for b in (1, 16, 64)
                for sk in (4096, 8192, 32768, 65536, 131072) if 4.0 * b * sk * hkv * 128 <= 4.5e9],
               ("fwd",)),
    # Issue 15's rows (the sm90 forward), forward only.
    "hopper": ([("hopper", 2, 8192, 8192, 16, 16, 128, False), ("hopper", 2, 8192, 8192, 16, 16, 128, True),
                ("hopper", 4, 8192, 8192, 32, 32, 64, False), ("hopper", 1, 16384, 16384, 32, 8, 128, True),
                ("hopper", 8, 2048, 2048, 32, 8, 128, True), ("hopper", 1, 32768, 32768, 16, 16, 128, False)],
               ("fwd",)),
    # Issue 16's GQA rows (the sm90 backward): 32/8 heads, d 128, causal, 16k tokens.
    "gqa": ([("gqa", 16384 // s, s, s, 32, 8, 128, True) for s in (4096, 8192, 16384)],
            ("fwd", "fwdbwd")),
    # Issue 15's bar sweep (cuda_bench.cpp sweep90): the paper sweep, d256 and GQA 32/8 d128 at
    # 4k/8k/16k causal, b1 h16 s32k d128; forward only.
    "sweep90": (paper(PAPER_SEQLENS)
                + [("sweep90", 16384 // s, s, s, 8, 8, 256, True) for s in (4096, 8192, 16384)]
                + [("sweep90", 16384 // s, s, s, 32, 8, 128, True) for s in (4096, 8192, 16384)]
                + [("sweep90", 1, 32768, 32768, 16, 16, 128, False)],
                ("fwd",)),
    # d = 256 beyond sweep90's causal rows (cuda_bench.cpp d256): 16k tokens, 8 heads, no mask at
    # 2k-16k, causal at 2k; forward only.
    "d256": ([("d256", 16384 // s, s, s, 8, 8, 256, False) for s in (2048, 4096, 8192, 16384)]
             + [("d256", 8, 2048, 2048, 8, 8, 256, True)],
             ("fwd",)),
    "long": ([("long", 1, s, s, 16, 16, 128, True) for s in (32768, 65536, 131072)],
             ("fwd", "fwdbwd")),
    # Issue 17's decode bar (kv_cache_bench.cpp decode): kv 4k, 32k, 128k, K+V up to 40 GB
    # (device-filled there, torch.randn here).
    "kv_decode": ([("kv_decode", b, 1, sk, h, hkv, 128, True)
                   for h, hkv in ((32, 8), (32, 32), (64, 8)) for b in (1, 16, 64)
                   for sk in (4096, 32768, 131072) if 4.0 * b * sk * hkv * 128 <= 40e9],
                  ("fwd",)),
    # The same rows on K/V stored token-major, [b, sk, hkv, d] (flash_attn_with_kvcache's cache
    # layout, and the one kv_cache_bench decode times fastattn on), passed to SDPA as transposed
    # views: both libraries on the same memory order (kv_cache_bench decode_hm is the other pair).
    "kv_decode_tm": ([("kv_decode_tm", b, 1, sk, h, hkv, 128, True)
                      for h, hkv in ((32, 8), (32, 32), (64, 8)) for b in (1, 16, 64)
                      for sk in (4096, 32768, 131072) if 4.0 * b * sk * hkv * 128 <= 40e9],
                     ("fwd",)),
    # b1 decode replayed from a CUDA graph of GRAPH_CALLS calls (kv_cache_bench.cpp graph), time per call.
    "kv_decode_graph": ([("kv_graph", 1, 1, sk, h, hkv, 128, True)
                         for h, hkv in ((32, 8), (32, 32), (64, 8)) for sk in (4096, 32768, 131072)],
                        ("fwd",)),
    # Multi-token decode (kv_cache_bench.cpp multitoken): seqlen_q 1..16, b8 kv 8k, GQA 32/8.
    # SDPA's causal mask is top-left aligned, so these rows are timed unmasked (see forward()).
    "kv_multitoken": ([("kv_multitoken", 8, sq, 8192, 32, 8, 128, True) for sq in (1, 2, 4, 8, 16)],
                      ("fwd",)),
}


GRAPH_CALLS = 20  # calls per captured graph in kv_decode_graph (kv_cache_bench.cpp graph: 20)


def graph_of(fn, calls):
    """A function replaying `calls` calls of fn captured in one CUDA graph (warmed up first on a
    side stream, as torch.cuda.graphs asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph.replay


def flash_attn_flops(b, sq, sk, h, d, causal, pass_):
    f = 4.0 * b * h * sq * sk * d / (2 if causal else 1)
    return f * {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}[pass_]


# Per-mode limits that keep the job inside one device call: the long rows run for seconds each,
# so one warm-up call, at most ~3 s of timed calls, and only the two fastest anchors.
MODE_LIMITS = {"long": {"warmup": 1, "max_seconds": 3.0, "backends": ("flash", "cudnn")}}
# The math backend is 20x slower than the others; its rows are capped to ~1.5 s of timed calls.
BACKEND_LIMITS = {"math": {"warmup": 1, "max_seconds": 1.5}}


def time_events(fn, warmup=3, repeats=20, max_seconds=6.0, floor=5, warm_ms=0.0):
    """Median GPU milliseconds of fn over back-to-back calls between CUDA events; warm_ms > 0:
    calls for that long first (the clocks drop while the next shape's tensors are set up)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    probe = max(start.elapsed_time(stop), 1e-3)
    if warm_ms > 0:
        for _ in range(min(5000, max(3, int(warm_ms / probe)))):
            fn()
        torch.cuda.synchronize()
    n = repeats
    if max_seconds > 0 and n * probe / 1e3 > max_seconds:
        n = max(floor, int(max_seconds * 1e3 / probe))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
    for a, b in events:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in events)
    mid = len(ms) // 2
    median = ms[mid] if len(ms) % 2 else 0.5 * (ms[mid - 1] + ms[mid])
    return median, ms[0], n


def math_memory_estimate(b, sq, sk, h, pass_):
    """Bytes the math backend needs, roughly: fp32-sized scores, probabilities and their
    gradients (a generous bound: bf16 intermediates need less)."""
    scores = b * h * sq * sk * 4
    return scores * (3 if pass_ == "fwd" else 6)


def emit(row):
    print(json.dumps(row), flush=True)


def gemm_peak(repeats):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms, _, reps = time_events(lambda: a @ b, warmup=10, repeats=max(repeats, 50))
    emit({"source": "sdpa", "kind": "gemm_peak", "m": n, "n": n, "k": n, "ms": ms,
          "repeats": reps, "tflops": 2 * n**3 / ms / 1e9})


def run_point(mode, point, pass_, backends, args):
    tag, b, sq, sk, h, hkv, d, causal = point
    q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16, requires_grad=pass_ != "fwd")
    if tag == "kv_decode_tm":  # token-major memory, seen through (b, hkv, sk, d) views
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    else:
        k = torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16, requires_grad=pass_ != "fwd")
        v = torch.randn(b, hkv, sk, d, device="cuda", dtype=torch.bfloat16, requires_grad=pass_ != "fwd")
    dout = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
    for name in backends:
        limits = {**MODE_LIMITS.get(mode, {}), **BACKEND_LIMITS.get(name, {})}
        row = {"source": "sdpa", "backend": name, "mode": mode, "tag": tag, "pass": pass_, "b": b,
               "sq": sq, "sk": sk, "h": h, "hkv": hkv, "d": d, "causal": causal, "dtype": "bf16"}
        if name not in MODE_LIMITS.get(mode, {}).get("backends", BACKENDS):
            row["skipped"] = f"not timed in mode {mode} (time budget of the device job)"
            emit(row)
            continue
        if name == "math":
            need, free = math_memory_estimate(b, sq, sk, h, pass_), torch.cuda.mem_get_info()[0]
            if need > 0.8 * free:
                row["skipped"] = (f"math materialises the scores: needs ~{need / 2**30:.0f} GiB, "
                                  f"{free / 2**30:.0f} GiB free")
                emit(row)
                continue

        def forward():
            # SDPA's causal mask is top-left aligned: for one query row it would hide all keys
            # but the first; bottom-right (fastattn's default, flash-attn's) sees them all, so a
            # one-row causal call is timed unmasked.
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal and sq == sk,
                                                  enable_gqa=hkv != h)

        def forward_backward():
            torch.autograd.grad(forward(), (q, k, v), dout)

        try:
            with sdpa_kernel(BACKENDS[name]):
                timed = forward if pass_ == "fwd" else forward_backward
                calls = GRAPH_CALLS if tag == "kv_graph" else 1
                if calls > 1:
                    timed = graph_of(forward, calls)
                if pass_ == "bwd":  # the backward alone: one forward, its graph kept across calls
                    out = forward()

                    def timed():
                        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                ms, min_ms, reps = time_events(
                    timed,
                    warmup=limits.get("warmup", 3), repeats=args.repeats,
                    max_seconds=min(args.max_seconds, limits.get("max_seconds", args.max_seconds)),
                    warm_ms=args.warm_ms)
            if calls > 1:  # time per call of the replayed graph
                ms, min_ms = ms / calls, min_ms / calls
                row["graph_calls"] = calls
            flops = flash_attn_flops(b, sq, sk, h, d, causal, pass_)
            row.update(ms=ms, min_ms=min_ms, repeats=reps, flops=flops, tflops=flops / ms / 1e9)
            if tag in ("splitkv", "decode", "kv_decode", "kv_decode_tm", "kv_multitoken", "kv_graph"):
                kv_bytes = 2.0 * b * sk * hkv * d * 2
                row.update(kv_bytes=kv_bytes, kv_gbs=kv_bytes / (ms / 1e3) / 1e9)
        except Exception as e:  # a backend that refuses a shape (or runs out of memory) is a row
            row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        emit(row)
        torch.cuda.empty_cache()  # the math backend's scores would otherwise stay cached


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("modes", nargs="+", choices=sorted(MODES))
    p.add_argument("--backends", default="flash,cudnn,efficient,math")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--max-seconds", type=float, default=6.0)
    p.add_argument("--no-gemm", action="store_true")
    p.add_argument("--warm-ms", type=float, default=0.0,
                   help="calls for this many ms before timing each row (kv_cache_bench uses 30)")
    p.add_argument("--passes", default=None,
                   help="comma-separated passes (fwd,bwd,fwdbwd) instead of the mode's, as cuda_bench --passes")
    args = p.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        p.error(f"unknown backends {unknown}; expected some of {sorted(BACKENDS)}")
    props = torch.cuda.get_device_properties(0)
    emit({"source": "sdpa", "kind": "device", "gpu": props.name, "sms": props.multi_processor_count,
          "memory_bytes": props.total_memory, "torch": torch.__version__,
          "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
          "command": sys.argv})
    if not args.no_gemm:
        try:
            gemm_peak(args.repeats)
        except Exception as e:  # the anchors still run without the ceiling
            emit({"source": "sdpa", "kind": "gemm_peak", "error": f"{type(e).__name__}: {e}"[:300]})
    for mode in args.modes:
        points, passes = MODES[mode]
        if args.passes:
            passes = tuple(x for x in args.passes.split(",") if x)
        for point in points:
            for pass_ in passes:
                run_point(mode, point, pass_, backends, args)
                torch.cuda.empty_cache()  # this point's tensors are freed now
    return 0


if __name__ == "__main__":
    sys.exit(main())
