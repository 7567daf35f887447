"""``python -m fastattn.bench``: fastattn against torch SDPA's backends, TFLOP/s vs seqlen.

    python -m fastattn.bench                         # CPU: fastattn cpu vs torch CPU SDPA
    python -m fastattn.bench --device cuda --dtype bfloat16 --causal --pass fwd,fwdbwd
    python -m fastattn.bench --overhead              # Python call overhead over the C++ call

Writes PREFIX.json (every measurement, with the machine and the options) and PREFIX.png (TFLOP/s
vs seqlen, one line per backend, one panel per pass; needs matplotlib, drawn with the Agg
backend, so no display is needed). FLOPs counted as in FlashAttention's benchmarks: forward
4 * batch * heads * seqlen_q * seqlen_k * head_dim (halved with causal), forward plus backward
3.5 times that. Times are medians over repeats after a warm-up; on CUDA each call is timed with
CUDA events. SDPA's math backend materialises the scores; on CUDA it is skipped (with the reason
in the JSON) where they would not fit in the free memory.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import fastattn

from . import _overhead


PASSES = ("fwd", "fwdbwd")


def flops(batch: int, heads: int, seqlen: int, head_dim: int, causal: bool, backward: bool) -> float:
    f = 4.0 * batch * heads * seqlen * seqlen * head_dim
    if causal:
        f /= 2
    return f * 3.5 if backward else f


def _wall_timer(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def _cuda_event_timer(torch) -> Callable[[Callable[[], Any], Callable[[], None]], float]:
    def timed(fn, sync):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / 1e3
    return timed


def median_seconds(fn: Callable[[], Any], sync: Callable[[], None], min_time: float,
                   max_repeats: int = 50, timer: Callable = _wall_timer) -> float:
    fn()  # warm-up (and first-call allocations)
    sync()
    times: List[float] = []
    total = 0.0
    while len(times) < 3 or (total < min_time and len(times) < max_repeats):
        elapsed = timer(fn, sync)
        times.append(elapsed)
        total += elapsed
    return statistics.median(times)


def math_skip_reason(torch, batch: int, heads: int, seqlen: int, backward: bool) -> Optional[str]:
    """Why SDPA math cannot run here (its scores, probabilities and their gradients, fp32-sized,
    would not fit in the free CUDA memory), or None."""
    need = batch * heads * seqlen * seqlen * 4 * (6 if backward else 3)
    free = torch.cuda.mem_get_info()[0]
    if need > 0.8 * free:
        return f"math materialises the scores: needs ~{need / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free"
    return None


def _sdpa_backends(torch, device: str) -> Dict[str, Any]:
    from torch.nn.attention import SDPBackend

    names = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION}
    if device == "cuda":
        names["efficient"] = SDPBackend.EFFICIENT_ATTENTION
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            names["cudnn"] = SDPBackend.CUDNN_ATTENTION
    return names


def run_torch(args) -> List[Dict[str, Any]]:
    import torch
    from torch.nn.attention import sdpa_kernel

    import fastattn.torch as fat

    device, dtype = args.device, getattr(torch, args.dtype)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    timer = _cuda_event_timer(torch) if cuda else _wall_timer
    rows: List[Dict[str, Any]] = []
    for pass_ in args.passes:
        backward = pass_ == "fwdbwd"
        for seqlen in args.seqlens:
            batch = max(1, args.tokens // seqlen)
            shape = (batch, seqlen, args.heads, args.head_dim)
            q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=backward)
                       for _ in range(3))
            dout = torch.randn(shape, device=device, dtype=dtype)
            qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_(backward) for x in (q, k, v))
            doutt = dout.transpose(1, 2)

            def fastattn_call():
                out = fat.attention(q, k, v, causal=args.causal, num_threads=args.threads)
                if backward:  # autograd.grad: no .grad accumulation inside the timed call
                    torch.autograd.grad(out, (q, k, v), dout)

            candidates = {"fastattn": (fastattn_call, None)}
            for name, kind in _sdpa_backends(torch, device).items():
                def sdpa_call(kind=kind):
                    with sdpa_kernel([kind]):
                        out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
                        if backward:
                            torch.autograd.grad(out, (qt, kt, vt), doutt)
                candidates[f"torch.sdpa.{name}"] = (sdpa_call, name)

            for name, (fn, sdpa_name) in candidates.items():
                row = {"backend": name, "pass": pass_, "seqlen": seqlen, "batch": batch}
                reason = math_skip_reason(torch, batch, args.heads, seqlen, backward) \
                    if cuda and sdpa_name == "math" else None
                if reason:
                    row.update(skipped=reason)
                else:
                    try:
                        seconds = median_seconds(fn, sync, args.min_time, timer=timer)
                        row.update(seconds=seconds,
                                   tflops=flops(batch, args.heads, seqlen, args.head_dim, args.causal,
                                                backward) / seconds / 1e12)
                    except (RuntimeError, ValueError) as e:  # backend unavailable for this input
                        row.update(error=str(e).strip().splitlines()[0][:200] if str(e).strip()
                                   else type(e).__name__)
                    if cuda:
                        torch.cuda.empty_cache()  # the math backend's scores stay cached otherwise
                rows.append(row)
                _print_row(row)
    return rows


def run_numpy(args) -> List[Dict[str, Any]]:
    """Without torch: fastattn on NumPy arrays alone (forward and backward)."""
    rows: List[Dict[str, Any]] = []
    rng = np.random.default_rng(0)
    for pass_, seqlen in ((p, s) for p in args.passes for s in args.seqlens):
        backward = pass_ == "fwdbwd"
        batch = max(1, args.tokens // seqlen)
        shape = (batch, seqlen, args.heads, args.head_dim)
        q, k, v, dout = (rng.standard_normal(shape).astype(args.dtype) for _ in range(4))

        def fastattn_call():
            if not backward:
                fastattn.attention(q, k, v, causal=args.causal, num_threads=args.threads)
                return
            out, lse = fastattn.attention(q, k, v, causal=args.causal, return_lse=True,
                                          num_threads=args.threads)
            fastattn.attention_backward(dout, q, k, v, out, lse, causal=args.causal,
                                        num_threads=args.threads)

        seconds = median_seconds(fastattn_call, lambda: None, args.min_time)
        row = {"backend": "fastattn", "pass": pass_, "seqlen": seqlen, "batch": batch,
               "seconds": seconds,
               "tflops": flops(batch, args.heads, seqlen, args.head_dim, args.causal,
                               backward) / seconds / 1e12}
        rows.append(row)
        _print_row(row)
    return rows


def _print_row(row: Dict[str, Any]) -> None:
    head = f"{row['backend']:>24} {row.get('pass', 'fwd'):>6} seqlen {row['seqlen']:>6}:"
    if "error" in row:
        print(f"{head} unavailable ({row['error']})", flush=True)
    elif "skipped" in row:
        print(f"{head} skipped ({row['skipped']})", flush=True)
    else:
        print(f"{head} {row['seconds'] * 1e3:9.3f} ms {row['tflops']:8.3f} TFLOP/s", flush=True)


def plot(rows: List[Dict[str, Any]], title: str, path: str) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display on servers
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    passes = list(dict.fromkeys(r.get("pass", "fwd") for r in rows)) or ["fwd"]
    fig, axes = plt.subplots(1, len(passes), figsize=(7 * len(passes), 4.5), squeeze=False)
    for ax, pass_ in zip(axes[0], passes):
        mine = [r for r in rows if r.get("pass", "fwd") == pass_]
        for backend in dict.fromkeys(r["backend"] for r in mine):
            points = [(r["seqlen"], r["tflops"]) for r in mine if r["backend"] == backend and "tflops" in r]
            if points:
                ax.plot(*zip(*points), marker="o", label=backend)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("seqlen")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{title} {pass_}", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def environment(args) -> Dict[str, Any]:
    env = {"python": sys.version.split()[0], "platform": platform.platform(),
           "processor": platform.processor(), "fastattn": fastattn.build_info()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["torch_threads"] = torch.get_num_threads()
        if args.device == "cuda":
            env["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    return env


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m fastattn.bench", description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None,
                   help="default: float32 on cpu, bfloat16 on cuda")
    p.add_argument("--seqlens", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="comma-separated; default 128..2048 on cpu, 512..16384 on cuda")
    p.add_argument("--tokens", type=int, default=None,
                   help="batch = max(1, tokens // seqlen); default 2048 on cpu, 16384 on cuda")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--backward", action="store_true", help="time forward + backward (= --pass fwdbwd)")
    p.add_argument("--pass", dest="passes", type=lambda s: [x for x in s.split(",") if x], default=None,
                   help="comma-separated passes: fwd, fwdbwd (default fwd)")
    p.add_argument("--threads", type=int, default=0, help="fastattn CPU threads (0: all)")
    p.add_argument("--min-time", type=float, default=0.3, help="seconds of timed runs per point")
    p.add_argument("--output", default="fastattn_bench", help="writes OUTPUT.json and OUTPUT.png")
    p.add_argument("--overhead", action="store_true",
                   help="measure Python call overhead over the C++ call instead")
    args = p.parse_args(argv)
    args.passes = args.passes or (["fwdbwd"] if args.backward else ["fwd"])
    bad = [x for x in args.passes if x not in PASSES]
    if bad:
        p.error(f"--pass: expected fwd or fwdbwd, got {bad}")
    cuda = args.device == "cuda"
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.seqlens = args.seqlens or ([512, 1024, 2048, 4096, 8192, 16384] if cuda
                                    else [128, 256, 512, 1024, 2048])
    args.tokens = args.tokens or (16384 if cuda else 2048)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.overhead:
        results = _overhead.measure_all()
        for r in results:
            print(_overhead.format_row(r))
        report: Dict[str, Any] = {"environment": environment(args), "overhead": results,
                                  "method": _overhead.__doc__}
        if args.device == "cuda":  # issue 17's per-call bar (b1 s128 h8 d64 bf16)
            report["torch_bar"] = _overhead.torch_bar("cuda")
            print(_overhead.format_bar(report["torch_bar"]))
        with open(args.output + "_overhead.json", "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.output}_overhead.json")
        return 0

    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
    if args.dtype == "bfloat16" and not have_torch:
        print("bfloat16 without torch: use --dtype float32 or float16", file=sys.stderr)
        return 2
    rows = run_torch(args) if have_torch else run_numpy(args)
    title = (f"{args.device} {args.dtype} heads={args.heads} head_dim={args.head_dim} "
             f"tokens={args.tokens} causal={args.causal}")
    with open(args.output + ".json", "w") as f:
        json.dump({"environment": environment(args), "options": vars(args), "results": rows},
                  f, indent=2)
    png = plot(rows, title, args.output + ".png")
    print(f"wrote {args.output}.json" + (f" and {png}" if png else " (no matplotlib: no plot)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
