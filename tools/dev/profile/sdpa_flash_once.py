"""Runs PyTorch SDPA's flash backend (or, --backend cudnn, its cuDNN one) a few times on one
shape, for Nsight Compute to profile (tools/dev/profile/ncu_*.sh, ab_variants.sh). bf16, q/k/v
random, (batch, heads, seqlen, head_dim).

    python3 tools/dev/profile/sdpa_flash_once.py --pass bwd --batch 2 --heads 16 --seqlen 8192 --head-dim 128
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--pass", dest="direction", choices=["fwd", "bwd"], default="fwd")
p.add_argument("--batch", type=int, default=2)
p.add_argument("--heads", type=int, default=16)
p.add_argument("--seqlen", type=int, default=8192)
p.add_argument("--head-dim", type=int, default=128)
p.add_argument("--causal", action="store_true")
p.add_argument("--calls", type=int, default=3)
p.add_argument("--backend", choices=["flash", "cudnn"], default="flash")
a = p.parse_args()
grad = a.direction == "bwd"
q, k, v = (torch.randn(a.batch, a.heads, a.seqlen, a.head_dim, device="cuda", dtype=torch.bfloat16,
                       requires_grad=grad) for _ in range(3))
backend = SDPBackend.FLASH_ATTENTION if a.backend == "flash" else SDPBackend.CUDNN_ATTENTION
with sdpa_kernel(backend):
    for _ in range(a.calls):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
        if grad:
            o.backward(torch.ones_like(q))
torch.cuda.synchronize()
