"""Runs PyTorch SDPA's cuDNN forward once on each of a few short rows of issue 15's sweep, for
Nsight Compute's launch statistics (grid, block, registers, shared memory: cuDNN's tile shape
and schedule) beside its duration (tools/dev/gpu-sm90-ab.sh, PROBE=1), or for a full profile of
the same rows (tools/dev/profile/ncu_sm90_short.sh). bf16, (b, h, s, d).

    ncu --section LaunchStats -k regex:sdpa python3 tools/dev/profile/sdpa_launch_probe.py
    python3 tools/dev/profile/sdpa_launch_probe.py --rows 32,16,512,128,0 32,32,512,64,1
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROWS = [(8, 16, 2048, 128, False), (8, 32, 2048, 64, True), (32, 16, 512, 128, True), (2, 16, 8192, 128, False)]
p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--rows", nargs="*", default=None, help="b,h,s,d,causal(0/1) each (default: the four above)")
args = p.parse_args()
rows = ROWS if args.rows is None else [tuple(int(x) for x in r.split(",")) for r in args.rows]
for b, h, s, d, causal in rows:
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        print(f"row b{b} h{h} s{s} d{d} causal={bool(causal)}", flush=True)
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    torch.cuda.synchronize()
