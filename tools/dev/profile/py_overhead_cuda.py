"""Per-call host time of fastattn's Python entry points on CUDA tensors, against the C++ call and
torch SDPA on the same tensors: fastattn._overhead.torch_bar at a few tiny shapes (the first is
issue 17's bar, b1 s128 h8 d64 bf16: fastattn.torch.attention eager <= 1.0x SDPA), then the
cost of each step of the eager path alone.

    python3 tools/dev/profile/py_overhead_cuda.py OUT.json

Each number is the minimum over repeats of the mean per call over 2000 enqueued calls, one
synchronize at the end of each repeat (fastattn._overhead).
"""
import json
import sys
import time

import torch
import torch.utils.dlpack

from fastattn import _C, _api, _overhead


def per_call(fn, iterations=2000, repeats=10):
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best * 1e6


import fastattn.torch as fat

# Whether fastattn.torch.attention can take its eager path here at all (every probe of the
# context found on this torch, none active): without it every call takes the custom op.
paths = {"modes_visible": bool(fat._MODES_VISIBLE), "plain_context": bool(fat._plain_context())}
print(json.dumps({"eager_path": paths}))

rows = [_overhead.torch_bar("cuda", shape) for shape in
        [_overhead.BAR_SHAPE, (1, 16, 2, 128), (1, 256, 8, 128)]]
for r in rows:
    print(_overhead.format_bar(r), "| fastattn.attention %.2f us" % r["torch_api_us"])

# Where the eager path's time goes: each step alone, per call.
q = torch.randn(_overhead.BAR_SHAPE, device="cuda", dtype=torch.bfloat16)
out = torch.empty_like(q)
cap = torch.utils.dlpack.to_dlpack
options = _api.call_options(False, None, None, 0.0, None, None, "bottom_right", "auto", 0, False,
                            torch._C._cuda_getCurrentRawStream(0), False)
steps = {
    "torch.compiler.is_compiling": torch.compiler.is_compiling,
    "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(0),
    "call_options (cached)": lambda: _api.call_options(False, None, None, 0.0, None, None,
                                                       "bottom_right", "auto", 0, False, 0, False),
    "torch.empty_like(contiguous)": lambda: torch.empty_like(q, memory_format=torch.contiguous_format),
    "torch.utils.dlpack.to_dlpack": lambda: cap(q),
    "_C.run_forward (4 capsules, C++ call)": lambda: _C.run_forward(cap(q), cap(q), cap(q), cap(out),
                                                                    None, None, None, options),
}
step_us = {name: per_call(fn) for name, fn in steps.items()}
for name, us in step_us.items():
    print(json.dumps({"step": name, "us": round(us, 2)}))
json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows, "eager_path": paths,
           "steps_us": step_us, "method": _overhead.__doc__},
          open(sys.argv[1] if len(sys.argv) > 1 else "py_overhead_cuda.json", "w"), indent=2)
