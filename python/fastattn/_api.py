"""fastattn's Python functions: attention, attention_backward, plan, build_info, reload_environment.

Each function turns keywords into the extension's CallOptions, allocates missing outputs in the
framework of ``q`` (see _arrays.py) and calls the C++ library through fastattn._C, which checks
every argument and raises ValueError / fastattn.UnsupportedError / RuntimeError / MemoryError
with the library's message.

Layout (as in the C++ API and flash-attn; note that torch SDPA uses [batch, heads, seqlen, dim]):
    q:        [batch, seqlen_q, num_heads, head_dim]        varlen: [total_q, num_heads, head_dim]
    k, v:     [batch, seqlen_k, num_kv_heads, head_dim]     varlen: [total_k, num_kv_heads, head_dim]
    out:      like q
    lse:      float32 [batch, num_heads, seqlen_q]          varlen: [num_heads, total_q]
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

from . import _C
from . import _arrays

Window = Optional[Tuple[int, int]]

_BACKENDS = {
    "auto": _C.Backend.automatic,
    "automatic": _C.Backend.automatic,
    "cpu": _C.Backend.cpu,
    "reference": _C.Backend.reference,
    "cuda": _C.Backend.cuda,
}
_ALIGNMENTS = {
    "bottom_right": _C.MaskAlignment.bottom_right,
    "top_left": _C.MaskAlignment.top_left,
}


def _enum(table: Dict[str, Any], value: Any, name: str) -> Any:
    try:
        return table[value]
    except (KeyError, TypeError):
        choices = ", ".join(repr(k) for k in table if k != "automatic")
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}") from None


def window_bounds(window: Window) -> Tuple[int, int]:
    """(window_left, window_right) of a ``window=`` argument; -1 is unbounded."""
    if window is None:
        return -1, -1
    try:
        left, right = window
        return int(left), int(right)
    except (TypeError, ValueError):
        raise ValueError(
            f"window: expected None or a pair (left, right) of ints (-1: unbounded), got {window!r}"
        ) from None


# CallOptions are immutable and most programs use a handful of option sets: reuse them, so a
# call pays one dict lookup instead of converting a dozen values (about 1.5 us).
_OPTIONS_CACHE: Dict[tuple, "_C.CallOptions"] = {}
_OPTIONS_CACHE_SIZE = 256


def call_options(causal: bool, window: Window, scale: Optional[float], softcap: float,
                 max_seqlen_q: Optional[int], max_seqlen_k: Optional[int], alignment: str,
                 backend: str, num_threads: int, deterministic: bool, cuda_stream: int,
                 bf16_storage: bool) -> "_C.CallOptions":
    """The extension's CallOptions for Python option values (raises ValueError on bad ones).

    Positional on purpose: this is on every call's path, and keyword passing costs more.
    """
    key = (causal, window, scale, softcap, max_seqlen_q, max_seqlen_k, alignment, backend,
           num_threads, deterministic, cuda_stream, bf16_storage)
    try:
        return _OPTIONS_CACHE[key]
    except (KeyError, TypeError):  # TypeError: an unhashable value, e.g. window as a list
        pass
    left, right = window_bounds(window)
    options = _C.CallOptions(
        bool(causal),
        left,
        right,
        None if scale is None else float(scale),
        float(softcap),
        int(max_seqlen_q or 0),
        int(max_seqlen_k or 0),
        _enum(_ALIGNMENTS, alignment, "alignment"),
        _enum(_BACKENDS, backend, "backend"),
        int(num_threads),
        bool(deterministic),
        int(cuda_stream),
        bool(bf16_storage),
    )
    try:
        if len(_OPTIONS_CACHE) >= _OPTIONS_CACHE_SIZE:
            _OPTIONS_CACHE.clear()
        _OPTIONS_CACHE[key] = options
    except TypeError:
        pass
    return options


def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    window: Window = None,
    scale: Optional[float] = None,
    softcap: float = 0.0,
    cu_seqlens_q: Any = None,
    cu_seqlens_k: Any = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    alignment: str = "bottom_right",
    return_lse: bool = False,
    out: Any = None,
    backend: str = "auto",
    num_threads: int = 0,
) -> Union[Any, Tuple[Any, Any]]:
    """Exact attention ``softmax(scale * q k^T + mask) v`` (FlashAttention-2), forward.

    Args:
        q: [batch, seqlen_q, num_heads, head_dim] (varlen: [total_q, num_heads, head_dim]);
            float32, float16 or bfloat16; any strides with head_dim contiguous. Any DLPack
            array: NumPy (bfloat16 via ml_dtypes), PyTorch, CuPy, JAX.
        k, v: [batch, seqlen_k, num_kv_heads, head_dim] (varlen: [total_k, ...]), q's dtype and
            device. num_heads must be a multiple of num_kv_heads (GQA/MQA): query head h reads
            KV head h // (num_heads // num_kv_heads).
        causal: mask keys after the query's diagonal (the window (left, 0)).
        window: (left, right) sliding window, -1 for unbounded: key j is visible to query i
            when d - left <= j <= d + right, d = i + (seqlen_k - seqlen_q) for bottom_right
            alignment, d = i for top_left.
        scale: softmax scale, default 1 / sqrt(head_dim).
        softcap: if > 0, scores become softcap * tanh(scale * q.k / softcap).
        cu_seqlens_q, cu_seqlens_k: int32 [batch + 1] cumulative offsets for variable-length
            batches (both or neither); q, k, v are then [total, heads, head_dim].
        max_seqlen_q, max_seqlen_k: longest sequences; required for CUDA varlen, computed on
            the CPU when omitted.
        alignment: "bottom_right" (flash-attn >= 2.1, default) or "top_left".
        return_lse: also return the float32 log-sum-exp [batch, num_heads, seqlen_q]
            (varlen: [num_heads, total_q]), natural log; needed by attention_backward.
        out: write the result here (like q) instead of allocating it.
        backend: "auto", "cpu", "reference" (float64, slow, for checking) or "cuda".
        num_threads: CPU threads; 0 uses OpenMP's default.

    Returns:
        out (like q, in q's framework), or (out, lse) with return_lse. A query that sees no key
        gets out = 0 and lse = -inf.

    Raises:
        ValueError: a bad argument; the message names it, what was expected and what was given.
        fastattn.UnsupportedError (a ValueError): no kernel for the call in this build, e.g.
            CUDA tensors while fastattn was built without CUDA.
        RuntimeError: a device error. MemoryError: an allocation failed.
    """
    fw = _arrays.framework_of(q)
    q = fw.adopt(q)
    options = call_options(causal, window, scale, softcap, max_seqlen_q, max_seqlen_k, alignment,
                           backend, num_threads, False, fw.cuda_stream(q), fw.is_bf16_storage(q))
    # lse_shape None where q's rank is wrong, which the library reports.
    out, out_arg, lse, lse_arg = _arrays.outputs(
        fw, q, out, _arrays.lse_shape(q, cu_seqlens_q is not None) if return_lse else None)
    export = _arrays.export
    _C.forward(export(q), export(k), export(v), out_arg, lse_arg, export(cu_seqlens_q),
               export(cu_seqlens_k), options, False)
    if return_lse:
        return fw.finish(out, q), fw.finish(lse, q)
    return fw.finish(out, q)


def attention_backward(
    dout: Any,
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    *,
    causal: bool = False,
    window: Window = None,
    scale: Optional[float] = None,
    softcap: float = 0.0,
    cu_seqlens_q: Any = None,
    cu_seqlens_k: Any = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    alignment: str = "bottom_right",
    deterministic: bool = False,
    dq: Any = None,
    dk: Any = None,
    dv: Any = None,
    backend: str = "auto",
    num_threads: int = 0,
) -> Tuple[Any, Any, Any]:
    """Gradients of attention: (dq, dk, dv) for the upstream gradient ``dout``.

    Args:
        dout: gradient of out, like q.
        q, k, v: the forward inputs. out, lse: the forward's outputs (``return_lse=True``).
        causal ... alignment, backend, num_threads: the forward's options (see attention).
        deterministic: reduce dq in a fixed order, so repeated calls are bitwise equal.
        dq, dk, dv: write the gradients here (like q, k, v) instead of allocating them; they
            are overwritten, not accumulated.

    Returns:
        (dq, dk, dv): dq like q, dk and dv like k (for GQA, summed over the query heads that
        share a KV head), in q's framework. lse is treated as a constant (no gradient flows
        through a returned lse).
    """
    fw = _arrays.framework_of(q)
    q = fw.adopt(q)
    options = call_options(causal, window, scale, softcap, max_seqlen_q, max_seqlen_k, alignment,
                           backend, num_threads, deterministic, fw.cuda_stream(q),
                           fw.is_bf16_storage(q))
    grads = []
    for given, like, name in ((dq, q, "dq"), (dk, k, "dk"), (dv, v, "dv")):
        if given is None:
            buffer = fw.empty(q, tuple(like.shape))
            grads.append((buffer, fw.export(buffer)))
        else:
            grads.append((given, _arrays.export_output(given, name)))
    export = _arrays.export
    _C.backward(export(dout), export(q), export(k), export(v), export(out), export(lse),
                grads[0][1], grads[1][1], grads[2][1], export(cu_seqlens_q),
                export(cu_seqlens_k), options, False)
    return tuple(fw.finish(g[0], q) for g in grads)  # type: ignore[return-value]


def plan(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    window: Window = None,
    scale: Optional[float] = None,
    softcap: float = 0.0,
    cu_seqlens_q: Any = None,
    cu_seqlens_k: Any = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    alignment: str = "bottom_right",
    backend: str = "auto",
    num_threads: int = 0,
    backward: bool = False,
    deterministic: bool = False,
) -> "_C.KernelChoice":
    """Validates a call and returns the kernel it would use, without running it.

    Takes attention's arguments (``backward=True``: attention_backward's, with the gradients
    allocated like q, k, v). The KernelChoice names the backend, kernel, ISA, tile sizes,
    threads, workspace and the reason; ``str(choice.describe())`` is one line for logs.
    Output buffers are allocated (uninitialised) only to be validated.
    """
    fw = _arrays.framework_of(q)
    q = fw.adopt(q)
    options = call_options(causal, window, scale, softcap, max_seqlen_q, max_seqlen_k, alignment,
                           backend, num_threads, deterministic, fw.cuda_stream(q),
                           fw.is_bf16_storage(q))
    out_shape = tuple(q.shape)
    lse_shape = _arrays.lse_shape(q, cu_seqlens_q is not None)
    export = _arrays.export
    out = export(fw.empty(q, out_shape))
    lse = export(fw.empty(q, lse_shape, float32=True)) if lse_shape is not None else None
    cu_q, cu_k = export(cu_seqlens_q), export(cu_seqlens_k)
    if not backward:
        return _C.forward(export(q), export(k), export(v), out, lse, cu_q, cu_k, options, True)
    if lse is None:  # q has the wrong rank: let the library say so
        return _C.forward(export(q), export(k), export(v), out, None, cu_q, cu_k, options, True)
    dout = export(fw.empty(q, out_shape))
    dq = export(fw.empty(q, out_shape))
    dk = export(fw.empty(q, tuple(k.shape)))
    dv = export(fw.empty(q, tuple(v.shape)))
    return _C.backward(dout, export(q), export(k), export(v), out, lse, dq, dk, dv, cu_q, cu_k,
                       options, True)


def set_device_memory_limit(limit: Union[None, int, str]) -> None:
    """Memory-capped mode, process-wide: the most device memory one CUDA call may need.

    ``limit``: bytes (``0``: no limit), a size such as ``"16G"``, ``"32GiB"``, ``"1.5GB"``
    (K/M/G/T and KiB..TiB are powers of 1024, KB..TB of 1000), or ``None`` to go back to the
    environment variable FASTATTN_DEVICE_MEMORY_LIMIT. A CUDA call (and ``plan``) whose tensors
    plus scratch (``KernelChoice.device_memory_bytes``) exceed it raises MemoryError naming the
    need, the limit and its source, before anything runs. CPU calls ignore it.
    """
    if limit is None:
        _C.set_device_memory_limit(None)
    elif isinstance(limit, str):
        _C.set_device_memory_limit(_C.parse_memory_size(limit, "limit"))
    elif isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        _C.set_device_memory_limit(limit)
    else:
        raise ValueError(
            f"limit: expected None, bytes >= 0 or a size string such as '16G', got {limit!r}")


def device_memory_limit() -> Tuple[int, str]:
    """(bytes, source) of the process-wide limit in force (set_device_memory_limit, else
    FASTATTN_DEVICE_MEMORY_LIMIT); bytes 0: no limit, source '' then."""
    return _C.device_memory_limit()


def build_info() -> Dict[str, Any]:
    """Build and machine facts: version, cuda_compiled, cpu_isas_compiled (kernels in this
    binary), cpu_isa_selected (what this CPU runs), cuda_archs_compiled, cuda_paths_compiled
    (per-architecture kernel paths: sm80, and sm75 / sm70 where built), cuda_head_dims (head dims
    with CUDA kernels), cuda_devices (one line per GPU; empty without one), cuda_device_paths (the
    path each GPU's calls take). It queries the devices, so it initialises CUDA."""
    return _C.build_info()


def reload_environment() -> None:
    """Re-read the FASTATTN_* environment variables. fastattn reads them once per process, at the
    first call that needs one; set os.environ, then call this for later calls to see the change.
    Values are checked by the calls that use them (ValueError naming the variable), not here."""
    _C.reload_environment()
