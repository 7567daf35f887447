"""Time PyTorch scaled_dot_product_attention per backend on the same shapes as
cuda_forward_bench (bf16, CUDA events via triton.testing.do_bench medians), plus the bf16 GEMM
ceiling, in the same job. Prints JSON lines."""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def shapes(sweep):
    out = []
    if sweep in ("paper", "all"):
        for d in (64, 128):
            for causal in (False, True):
                for s in (512, 1024, 2048, 4096, 8192, 16384):
                    out.append(("paper", 16384 // s, s, 2048 // d, d, causal))
    if sweep == "short":
        for d in (64, 128):
            for causal in (False, True):
                for s in (2048, 8192):
                    out.append(("paper", 16384 // s, s, 2048 // d, d, causal))
        out.append(("seqpar", 1, 32768, 16, 128, False))
    if sweep in ("extra", "all"):
        for d in (64, 128):
            out.append(("seqpar", 1, 32768, 16, d, False))
    return out


def main():
    sweep = sys.argv[1] if len(sys.argv) > 1 else "paper"
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = do_bench(lambda: a @ b, warmup=50, rep=200, return_mode="median")
    print(json.dumps({"tag": "gemm_peak", "tflops": 2 * 8192**3 / ms / 1e9}), flush=True)
    del a, b
    for tag, bsz, s, h, d, causal in shapes(sweep):
        q, k, v = (torch.randn(bsz, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * bsz * h * s * s * d / (2 if causal else 1)
        for name, backend in BACKENDS.items():
            if name == "math" and (s != 8192 or causal or tag != "paper"):
                continue  # materialises b*h*s*s scores; the bar needs s = 8k only
            if name == "efficient" and sweep == "short":
                continue
            try:
                with sdpa_kernel(backend):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    fn()
                    ms = do_bench(fn, warmup=10, rep=50, return_mode="median")
                row = {"tag": tag, "backend": name, "b": bsz, "s": s, "h": h, "d": d,
                       "causal": causal, "ms": ms, "tflops": flops / ms / 1e9}
            except Exception as e:  # a backend that refuses a shape is recorded, not fatal
                row = {"tag": tag, "backend": name, "b": bsz, "s": s, "h": h, "d": d,
                       "causal": causal, "error": str(e).splitlines()[0][:200]}
            print(json.dumps(row), flush=True)
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
