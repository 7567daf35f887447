"""Array frameworks: where outputs are allocated, how arrays reach the C++ extension.

fastattn reads and writes caller memory through DLPack without copies. What differs between
frameworks is only (1) how to allocate an output "like" an input, (2) which CUDA stream a call
runs on, and (3) a few export quirks:

* NumPy has no bfloat16; ml_dtypes adds one that DLPack cannot describe, so such arrays are
  passed as uint16 views and the extension is told that uint16 means bfloat16.
* PyTorch tensors are passed as DLPack capsules from ``torch.utils.dlpack.to_dlpack``: it is
  several times cheaper than ``Tensor.__dlpack__`` (a Python method) and, unlike it, accepts
  tensors that require grad.
* JAX arrays are immutable: outputs are computed into NumPy buffers and handed to JAX.
* Any other DLPack producer on the CPU is viewed through NumPy (``np.from_dlpack``), so its
  outputs are NumPy arrays.

Adapters are looked up by ``type(x)`` and cached, so the common case costs one dict lookup.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from . import _C

try:  # NumPy's bfloat16, when ml_dtypes is installed
    import ml_dtypes as _ml_dtypes

    _NUMPY_BF16: Optional[np.dtype] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _NUMPY_BF16 = None  # no array has this dtype: every bf16 check is False

_DLPACK_CPU = 1
_DLPACK_CUDA_HOST = 3


class Framework:
    """How one array library allocates outputs and exports arrays."""

    name = "framework"

    def adopt(self, x: Any) -> Any:
        """The array this adapter works with for input ``q``: checks it can be served, and
        converts it where the adapter needs another type (identity for most)."""
        return x

    def empty(self, like: Any, shape: Sequence[int], float32: bool = False) -> Any:
        """An uninitialised array of ``shape`` on ``like``'s device, with ``like``'s dtype
        (or float32)."""
        raise NotImplementedError

    def empty_like(self, like: Any) -> Any:
        """An uninitialised array with ``like``'s shape, dtype and device (any strides)."""
        return self.empty(like, tuple(like.shape))

    def is_bf16_storage(self, x: Any) -> bool:
        """True when ``x`` holds bfloat16 that must be exported as uint16 (NumPy only)."""
        return False

    def export(self, x: Any) -> Any:
        """What the extension imports for ``x``."""
        return x

    def finish(self, x: Any, like: Any) -> Any:
        """The array returned to the caller for an output buffer ``x`` of input ``like``."""
        return x

    def cuda_stream(self, like: Any) -> int:
        """The CUDA stream (as an integer) a call on ``like`` runs on; 0 for the CPU."""
        return 0

    def check_output(self, x: Any, name: str) -> None:
        """Raises ValueError when ``x`` cannot be written (``out=``, ``dq=``, ...)."""


class NumPyFramework(Framework):
    name = "numpy"

    def empty(self, like, shape, float32=False):
        return np.empty(shape, np.float32 if float32 else like.dtype)

    def empty_like(self, like):
        return np.empty_like(like)

    # `is`: ml_dtypes' bfloat16 descriptor is a singleton, and identity is half the cost of ==.
    def is_bf16_storage(self, x):
        return x.dtype is _NUMPY_BF16

    def export(self, x):
        return x.view(np.uint16) if x.dtype is _NUMPY_BF16 else x


class TorchFramework(Framework):
    name = "torch"

    def __init__(self) -> None:
        import torch
        import torch.utils.dlpack

        self._torch = torch
        self._to_dlpack = torch.utils.dlpack.to_dlpack
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    def empty(self, like, shape, float32=False):
        # Tensor.new_empty: like's device and dtype, about half the cost of torch.empty(...).
        return like.new_empty(shape, dtype=self._torch.float32) if float32 else like.new_empty(shape)

    def empty_like(self, like):
        return self._torch.empty_like(like)  # the cheapest torch allocation call

    def export(self, x):
        return self._to_dlpack(x)

    def cuda_stream(self, like):
        if like.is_cuda:
            # The raw cudaStream_t of the current stream without building a torch.cuda.Stream
            # object (the cost Triton avoids the same way); the public call where it is absent.
            if self._raw_stream is not None:
                return self._raw_stream(like.device.index)
            return self._torch.cuda.current_stream(like.device).cuda_stream
        return 0


class CuPyFramework(Framework):
    name = "cupy"

    def __init__(self) -> None:
        import cupy

        self._cupy = cupy

    def empty(self, like, shape, float32=False):
        with like.device:
            return self._cupy.empty(shape, self._cupy.float32 if float32 else like.dtype)

    def cuda_stream(self, like):
        return self._cupy.cuda.get_current_stream().ptr


class JaxFramework(Framework):
    """JAX arrays are immutable: outputs are NumPy buffers turned into JAX arrays at the end."""

    name = "jax"

    def __init__(self) -> None:
        import jax

        self._jax = jax

    def adopt(self, x):
        devices = x.devices() if hasattr(x, "devices") else set()
        if any(d.platform != "cpu" for d in devices):
            raise _C.UnsupportedError(
                "q: expected a JAX array on the CPU (outputs are written into caller memory, "
                f"which JAX arrays on an accelerator cannot be), got devices {sorted(map(str, devices))}"
            )
        return x

    def empty(self, like, shape, float32=False):
        return np.empty(shape, np.float32 if float32 else np.dtype(like.dtype))

    def is_bf16_storage(self, x):
        return isinstance(x, np.ndarray) and x.dtype is _NUMPY_BF16

    def export(self, x):
        return NUMPY.export(x) if isinstance(x, np.ndarray) else x

    def finish(self, x, like):
        # On like's device (the CPU), not JAX's default device, which may be a GPU.
        return self._jax.device_put(x, next(iter(like.devices())))

    def check_output(self, x, name):
        raise ValueError(f"{name}: expected a writable array, got a JAX array (immutable); "
                         f"omit {name}= and use the returned array")


class GenericFramework(NumPyFramework):
    """Any other DLPack producer: viewed through NumPy on the CPU, so outputs are NumPy."""

    name = "generic"

    def export(self, x):
        # k, v, ... of the foreign type go to the extension as they are (it speaks DLPack).
        return NUMPY.export(x) if isinstance(x, np.ndarray) else x

    def adopt(self, x):
        device_type, _ = x.__dlpack_device__()
        if device_type not in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
            raise ValueError(
                f"q: expected a CPU array for {type(x).__name__} (outputs of DLPack producers "
                f"fastattn does not know are allocated with NumPy), got DLPack device type "
                f"{device_type}; pass out= or use PyTorch/CuPy arrays on the GPU"
            )
        return np.from_dlpack(x)


NUMPY = NumPyFramework()
_GENERIC = GenericFramework()

# Module name prefix -> adapter factory, for types seen the first time.
_FACTORIES: Dict[str, Callable[[], Framework]] = {
    "numpy": lambda: NUMPY,
    "torch": TorchFramework,
    "cupy": CuPyFramework,
    "jax": JaxFramework,
    "jaxlib": JaxFramework,
}
_BY_TYPE: Dict[type, Framework] = {np.ndarray: NUMPY}


def framework_of(x: Any) -> Framework:
    """The adapter for array ``x``; raises ValueError when ``x`` is not an array."""
    tp = type(x)
    fw = _BY_TYPE.get(tp)
    if fw is not None:
        return fw
    root = (getattr(tp, "__module__", "") or "").split(".")[0]
    factory = _FACTORIES.get(root)
    if factory is not None:
        fw = factory()
    elif hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        fw = _GENERIC
    else:
        raise ValueError(
            "q: expected an array (NumPy, PyTorch, CuPy, JAX or any DLPack producer), "
            f"got an object of type {tp.__name__}"
        )
    _BY_TYPE[tp] = fw
    return fw


def export(x: Any) -> Any:
    """What the extension imports for an array argument (None stays None)."""
    if x is None:
        return None
    tp = type(x)
    if tp is np.ndarray:
        return NUMPY.export(x)
    fw = _BY_TYPE.get(tp)
    return fw.export(x) if fw is not None else x


def export_output(x: Any, name: str) -> Any:
    """As export(), for a caller-provided output (refuses immutable arrays)."""
    if type(x) is np.ndarray:
        return NUMPY.export(x)
    try:
        fw = framework_of(x)
    except ValueError:  # not an array: the extension reports it under `name`
        return x
    fw.check_output(x, name)
    return fw.export(x)


def outputs(fw: Any, q: Any, out: Any, lse_dims: Optional[Tuple[int, ...]]) -> Tuple[Any, Any, Any, Any]:
    """(out, out_arg, lse, lse_arg) for an extension call: out a new array like q in its
    framework, or the caller's (checked as an output); lse a new float32 array of lse_dims, or
    None where lse_dims is None. The *_arg values are what the extension takes."""
    if out is None:
        out = fw.empty_like(q)
        out_arg = fw.export(out)
    else:
        out_arg = export_output(out, "out")
    if lse_dims is None:
        return out, out_arg, None, None
    lse = fw.empty(q, lse_dims, float32=True)
    return out, out_arg, lse, fw.export(lse)


def lse_shape(q: Any, varlen: bool) -> Optional[Tuple[int, ...]]:
    """Shape of lse for q, or None where q's rank is wrong (the library reports that)."""
    shape = tuple(q.shape)
    if varlen:
        return (shape[1], shape[0]) if len(shape) == 3 else None
    return (shape[0], shape[2], shape[1]) if len(shape) == 4 else None
