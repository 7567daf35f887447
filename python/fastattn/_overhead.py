"""Python call overhead of fastattn.attention over the C++ call, measured.

What is compared, on the same tiny problem and the same arrays:

* C++: ``fastattn::forward`` called in a loop inside the extension (``_C.time_forward``): the
  library's own cost (validation, dispatch, kernel), no Python, no allocation.
* Python: ``fastattn.attention(q, k, v, ...)`` called in a Python loop: keyword handling, output
  allocation in q's framework, DLPack import of every array, the GIL release, the same C++ call.

overhead = Python per-call time - C++ per-call time. Each is the minimum over many short repeats
(a few milliseconds each) of the mean per call: the minimum is the repeat least disturbed by other
processes, which on a busy machine is the only stable number.
The CPU backend runs with num_threads=1 so OpenMP's fork/join is not part of either number.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from . import _C, _api, _arrays

DEFAULT_SHAPE = (1, 1, 1, 8)  # [batch, seqlen, heads, head_dim]: the smallest valid call


def _per_call(fn: Callable[[], Any], iterations: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


def measure(framework: str = "numpy", shape=DEFAULT_SHAPE, backend: str = "cpu",
            iterations: int = 300, repeats: int = 40) -> Dict[str, Any]:
    """Seconds per call of the C++ loop and of fastattn.attention, and their difference."""
    rng = np.random.default_rng(0)
    q_np = rng.standard_normal(shape).astype(np.float32)
    if framework == "numpy":
        q = q_np
    elif framework == "torch":
        import torch

        q = torch.from_numpy(q_np)
    else:
        raise ValueError(f"framework: expected 'numpy' or 'torch', got {framework!r}")
    k, v = q_np.copy(), q_np.copy()
    if framework == "torch":
        k, v = torch.from_numpy(k), torch.from_numpy(v)

    fw = _arrays.framework_of(q)
    options = _api.call_options(False, None, None, 0.0, None, None, "bottom_right", backend, 1,
                                False, 0, False)
    out = fw.empty(q, tuple(q.shape))

    def cpp_loop() -> float:
        return _C.time_forward(fw.export(q), fw.export(k), fw.export(v), fw.export(out), None,
                               None, None, options, iterations)

    cpp = min(cpp_loop() for _ in range(repeats))

    def python_call() -> None:
        _api.attention(q, k, v, backend=backend, num_threads=1)

    python = _per_call(python_call, iterations, repeats)
    result: Dict[str, Any] = {
        "framework": framework,
        "shape": list(shape),
        "backend": backend,
        "cpp_us": cpp * 1e6,
        "python_us": python * 1e6,
        "overhead_us": (python - cpp) * 1e6,
    }
    if framework == "torch":
        import torch

        from . import torch as fat

        result["torch_custom_op_us"] = _per_call(
            lambda: fat.attention(q, k, v, backend=backend, num_threads=1), iterations, repeats
        ) * 1e6
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        result["torch_sdpa_us"] = _per_call(
            lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt),
            iterations, repeats) * 1e6
    return result


def measure_all(iterations: int = 300, repeats: int = 40) -> List[Dict[str, Any]]:
    """The overhead for NumPy and, where installed, PyTorch, at the smallest and a small size."""
    frameworks = ["numpy"]
    try:
        import torch  # noqa: F401

        frameworks.append("torch")
    except ImportError:
        pass
    return [measure(fw, shape, iterations=iterations, repeats=repeats)
            for fw in frameworks for shape in (DEFAULT_SHAPE, (1, 16, 2, 64))]


def format_row(r: Dict[str, Any], extra: Optional[str] = None) -> str:
    line = (f"{r['framework']:>6} {str(tuple(r['shape'])):>16}  C++ {r['cpp_us']:7.2f} us   "
            f"fastattn.attention {r['python_us']:7.2f} us   overhead {r['overhead_us']:6.2f} us")
    if "torch_custom_op_us" in r:
        line += (f"   (fastattn.torch.attention {r['torch_custom_op_us']:.1f} us, "
                 f"torch SDPA {r['torch_sdpa_us']:.1f} us)")
    return line
