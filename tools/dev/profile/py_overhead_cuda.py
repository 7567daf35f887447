"""Per-call host time of fastattn's Python entry points on CUDA tensors, against the C++ call.

Same method as fastattn._overhead (the CPU bar): the C++ loop (``_C.time_forward``: validation,
dispatch, launch; arrays imported once) against ``fastattn.attention`` and the torch custom op
``fastattn.torch.attention`` in Python loops, and torch SDPA for scale. Each number is the
minimum over repeats of the mean per call over `iterations` enqueued calls; a final synchronize
per repeat keeps the GPU from falling behind unnoticed.
"""
import json
import sys
import time

import torch

import fastattn
from fastattn import _C, _api, _arrays
import fastattn.torch as fat


def per_call(fn, iterations=200, repeats=20):
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best * 1e6


def measure(shape):
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    fw = _arrays.framework_of(q)
    stream = fw.cuda_stream(q)
    options = _api.call_options(False, None, None, 0.0, None, None, "bottom_right", "automatic", 0, False,
                                stream, fw.is_bf16_storage(q))
    out = fw.empty_like(q)
    cpp = min(_C.time_forward(fw.export(q), fw.export(k), fw.export(v), fw.export(out), None, None, None,
                              options, 200) for _ in range(20)) * 1e6
    row = {"shape": list(shape), "cpp_us": cpp,
           "python_us": per_call(lambda: fastattn.attention(q, k, v)),
           "torch_custom_op_us": per_call(lambda: fat.attention(q, k, v))}
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    row["torch_sdpa_us"] = per_call(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt))
    row["python_overhead_us"] = row["python_us"] - row["cpp_us"]
    return row


rows = [measure(s) for s in [(1, 16, 2, 128), (1, 256, 8, 128), (32, 512, 16, 128)]]
for r in rows:
    print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}))
json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
          open(sys.argv[1] if len(sys.argv) > 1 else "py_overhead_cuda.json", "w"), indent=2)

# Where the Python path's time goes: each step alone, per call.
q = torch.randn((1, 16, 2, 128), device="cuda", dtype=torch.bfloat16)
steps = {
    "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream(q.device).cuda_stream,
    "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(0),
    "torch.utils.dlpack.to_dlpack": lambda: torch.utils.dlpack.to_dlpack(q),
    "torch.empty_like": lambda: torch.empty_like(q),
    "framework_of + adopt": lambda: _arrays.framework_of(q).adopt(q),
}
for name, fn in steps.items():
    print(json.dumps({"step": name, "us": round(per_call(fn, 1000, 10), 2)}))
