"""Python call overhead of fastattn.attention over the C++ call, measured.

What is compared, on the same tiny problem and the same arrays:

* C++: ``fastattn::forward`` called in a loop inside the extension (``_C.time_forward``): the
  library's own cost (validation, dispatch, kernel), no Python, no allocation.
* Python: ``fastattn.attention(q, k, v, ...)`` called in a Python loop: keyword handling, output
  allocation in q's framework, DLPack import of every array, the GIL release, the same C++ call.
* With torch (``torch_*`` keys): ``fastattn.torch.attention`` on tensors that need no gradient
  (the eager path: the extension called directly), ``fastattn.attention`` on the same tensors,
  the custom op ``torch.ops.fastattn.forward`` that autograd and torch.compile use, and
  ``scaled_dot_product_attention`` on the same tensors.

overhead = Python per-call time - C++ per-call time. Each is the minimum over many short repeats
(a few milliseconds each) of the mean per call: the minimum is the repeat least disturbed by other
processes, which on a busy machine is the only stable number.
The CPU backend runs with num_threads=1 so OpenMP's fork/join is not part of either number.

``torch_bar`` is issue 17's bar: per-call time of ``fastattn.torch.attention`` in a host-bound
loop (2000 calls, one synchronize at the end of each repeat), eager, at most 1.0x SDPA's on the
same tensors (b1 s128 h8 d64 bf16 on CUDA).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from . import _C, _api, _arrays

DEFAULT_SHAPE = (1, 1, 1, 8)  # [batch, seqlen, heads, head_dim]: the smallest valid call
BAR_SHAPE = (1, 128, 8, 64)  # issue 17's tiny call


def _per_call(fn: Callable[[], Any], iterations: int, repeats: int,
              sync: Callable[[], Any] = lambda: None) -> float:
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


def _torch_rows(q, k, v, backend: str, num_threads: int, iterations: int, repeats: int,
                sync: Callable[[], Any]) -> Dict[str, float]:
    """Seconds per call of the three torch entry points on the same tensors (no gradient)."""
    import torch

    from . import torch as fat

    def eager():
        fat.attention(q, k, v, backend=backend, num_threads=num_threads)

    def api():
        _api.attention(q, k, v, backend=backend, num_threads=num_threads)

    def custom_op():
        torch.ops.fastattn.forward(q, k, v, None, None, False, -1, -1, None, 0.0, 0, 0,
                                   "bottom_right", backend, num_threads, False)

    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def sdpa():
        torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)

    for fn in (eager, api, custom_op, sdpa):  # warm-up: first-call costs (kernel loads, caches)
        for _ in range(20):
            fn()
    sync()
    return {name: _per_call(fn, iterations, repeats, sync) * 1e6
            for name, fn in (("torch_eager_us", eager), ("torch_api_us", api),
                             ("torch_custom_op_us", custom_op), ("torch_sdpa_us", sdpa))}


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
        result.update(_torch_rows(q, k, v, backend, 1, iterations, repeats, lambda: None))
    return result


def torch_bar(device: str = "cuda", shape=BAR_SHAPE, dtype: str = "bfloat16",
              iterations: int = 2000, repeats: int = 10) -> Dict[str, Any]:
    """Issue 17's per-call bar: fastattn.torch.attention (eager) against SDPA, same tensors.

    Also the C++ loop on the same arrays (``cpp_us``: validation, dispatch, launch or CPU kernel)
    and the custom op. On the CPU, fastattn runs one thread and torch is set to one thread too,
    so neither number holds a thread pool's fork/join.
    """
    import torch

    torch_dtype = getattr(torch, dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float32).to(device, torch_dtype)
               for _ in range(3))
    cuda = q.is_cuda
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    threads = 0 if cuda else 1
    saved_threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(1)
    try:
        fw = _arrays.framework_of(q)
        options = _api.call_options(False, None, None, 0.0, None, None, "bottom_right", "auto",
                                    threads, False, fw.cuda_stream(q), False)
        out = torch.empty_like(q)
        cpp = min(_C.time_forward(fw.export(q), fw.export(k), fw.export(v), fw.export(out), None,
                                  None, None, options, iterations) for _ in range(repeats))
        sync()
        row: Dict[str, Any] = {"device": torch.cuda.get_device_name() if cuda else "cpu",
                               "shape": list(shape), "dtype": dtype, "iterations": iterations,
                               "cpp_us": cpp * 1e6}
        row.update(_torch_rows(q, k, v, "auto", threads, iterations, repeats, sync))
    finally:
        torch.set_num_threads(saved_threads)
    row["eager_vs_sdpa"] = row["torch_eager_us"] / row["torch_sdpa_us"]
    row["bar"] = "eager <= 1.0x SDPA"
    row["passed"] = row["eager_vs_sdpa"] <= 1.0
    return row


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
    if "torch_eager_us" in r:
        line += (f"   (fastattn.torch.attention {r['torch_eager_us']:.1f} us, custom op "
                 f"{r['torch_custom_op_us']:.1f} us, torch SDPA {r['torch_sdpa_us']:.1f} us)")
    return line


def format_bar(r: Dict[str, Any]) -> str:
    return (f"{r['device']} {r['dtype']} {tuple(r['shape'])}: fastattn.torch.attention "
            f"{r['torch_eager_us']:.2f} us, SDPA {r['torch_sdpa_us']:.2f} us "
            f"({r['eager_vs_sdpa']:.2f}x; bar <= 1.0x: {'pass' if r['passed'] else 'FAIL'}); "
            f"custom op {r['torch_custom_op_us']:.2f} us; C++ loop {r['cpp_us']:.2f} us")
