"""fastattn.attention_with_kv_cache and fastattn.KVCachePlan: attention over a KV cache.

The semantics of flash-attn's ``flash_attn_with_kvcache`` (see docs/inference.md):

    q:              [batch, seqlen_q, num_heads, head_dim]
    k_cache, v_cache:
        contiguous  [batch, capacity, num_kv_heads, head_dim]              (block_table None)
        paged       [num_pages, page_size, num_kv_heads, head_dim]         any page_size >= 1
    block_table:    int32 [batch, max_pages_per_seq]; page p of sequence b is k_cache[block_table[b, p]]
    cache_seqlens:  int32 [batch] (or an int for every sequence): tokens already in each cache
    k_new, v_new:   (flash-attn's k, v, accepted by keyword) [batch, seqlen_new, num_kv_heads,
                    head_dim], written into the cache at
                    cache_seqlens[b] .. before attending (cache_seqlens is not advanced: the
                    caller does that, as with flash-attn)
    out:            like q;  lse: float32 [batch, num_heads, seqlen_q]

Query i of sequence b sees keys 0 .. cache_seqlens[b] + seqlen_new - 1; causal masks and
windows are aligned to the end of the cache (bottom-right).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from . import _C
from . import _arrays
from . import _cooperative
from ._api import Window, call_options


def _seqlens(cache_seqlens: Any, q: Any, fw: _arrays.Framework) -> Any:
    """cache_seqlens as an int32 array in q's framework and device (an int: the same for every
    sequence); arrays are passed through for the library to check."""
    if not isinstance(cache_seqlens, (int, np.integer)) or isinstance(cache_seqlens, bool):
        return cache_seqlens
    batch = int(q.shape[0]) if len(getattr(q, "shape", ())) == 4 else 0
    if fw.name == "torch":
        import torch

        return torch.full((batch,), int(cache_seqlens), dtype=torch.int32, device=q.device)
    if fw.name == "cupy":
        import cupy

        with q.device:
            return cupy.full((batch,), int(cache_seqlens), dtype=cupy.int32)
    return np.full((batch,), int(cache_seqlens), dtype=np.int32)


def _flash_window(window: Window, window_size: Any, causal: bool) -> Window:
    """window, or flash_attn_with_kvcache's window_size (left, right), -1 unbounded, with its
    rule that causal means right = 0."""
    if window_size is None:
        return window
    if window is not None:
        raise ValueError("window and window_size: the same argument under two names (window_size is "
                         "flash_attn_with_kvcache's); pass one")
    try:
        left, right = window_size
        left, right = int(left), int(right)
    except (TypeError, ValueError):
        raise ValueError(f"window_size: expected a pair (left, right) of ints (-1: unbounded), "
                         f"got {window_size!r}") from None
    if causal:
        right = 0
    return None if (left, right) == (-1, -1) else (left, right)


def _one_of(value: Any, alias: Any, name: str, alias_name: str) -> Any:
    """value, or its flash_attn_with_kvcache alias; both given is an error."""
    if alias is None:
        return value
    if value is not None:
        raise ValueError(f"{name} and {alias_name}: the same argument under two names "
                         f"({alias_name} is flash_attn_with_kvcache's); pass one")
    return alias


def _full_seqlens(q: Any, k_cache: Any, block_table: Any, appending: bool) -> int:
    """cache_seqlens=None (flash_attn_with_kvcache's default): every cache full, as an int."""
    if appending:
        raise ValueError("cache_seqlens: expected the tokens already in each cache when appending "
                         "(k / v given), got None")
    shape = tuple(getattr(k_cache, "shape", ()))
    if len(shape) != 4:
        return 0  # the library reports the cache's rank
    if block_table is None:
        return int(shape[1])
    return int(tuple(block_table.shape)[1]) * int(shape[1])


def _lse_shape(q: Any) -> Optional[Tuple[int, int, int]]:
    shape = tuple(q.shape)
    return (shape[0], shape[2], shape[1]) if len(shape) == 4 else None


def _cache_arg(cache: Any, name: str, appending: bool) -> Any:
    # An appended-to cache is written: refuse immutable arrays (JAX) by name.
    return _arrays.export_output(cache, name) if appending else _arrays.export(cache)


def attention_with_kv_cache(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    cache_seqlens: Any = None,
    block_table: Any = None,
    k_new: Any = None,
    v_new: Any = None,
    *,
    k: Any = None,
    v: Any = None,
    causal: bool = False,
    window: Window = None,
    window_size: Any = None,
    softcap: float = 0.0,
    softmax_scale: Optional[float] = None,
    return_lse: bool = False,
    return_softmax_lse: bool = False,
    out: Any = None,
    backend: str = "auto",
    num_threads: int = 0,
) -> Union[Any, Tuple[Any, Any]]:
    """Attention of ``q`` over a KV cache, after appending ``k_new`` / ``v_new`` in place.

    Args:
        q: [batch, seqlen_q, num_heads, head_dim], float32, float16 or bfloat16, any strides
            with head_dim contiguous. Any DLPack array: NumPy (bfloat16 via ml_dtypes),
            PyTorch, CuPy, JAX (on the CPU, without appending: JAX arrays are immutable).
        k_cache, v_cache: the cache, q's dtype and device, one shape: contiguous
            [batch, capacity, num_kv_heads, head_dim], or paged [num_pages, page_size,
            num_kv_heads, head_dim] with ``block_table``. num_heads must be a multiple of
            num_kv_heads (GQA/MQA).
        cache_seqlens: int32 [batch] tokens already in each sequence's cache, or an int; None
            (without an append): every cache full (its capacity).
        block_table: int32 [batch, max_pages_per_seq] for a paged cache; slots past a
            sequence's pages are not read (they may hold -1).
        k_new, v_new: optional [batch, seqlen_new, num_kv_heads, head_dim], appended at
            cache_seqlens[b] before attending. Both or neither.
        causal, window, softcap, softmax_scale: as fastattn.attention (aligned bottom-right,
            to the end of each sequence's cache).
        return_lse: also return lse, float32 [batch, num_heads, seqlen_q].
        out: write the result here (like q) instead of allocating it.
        backend: "auto", "cpu", "reference" (float64) or "cuda".
        num_threads: CPU threads; 0 uses OpenMP's default.
        k, v, window_size, return_softmax_lse: flash_attn_with_kvcache's names for k_new, v_new,
            window ((left, right), -1 unbounded; causal sets right to 0) and return_lse, so
            its keyword calls work unchanged (docs/inference.md has the mapping). Its
            positional order differs after v_cache (here cache_seqlens comes fourth): pass
            k / v by keyword.

    Returns:
        out (like q, in q's framework), or (out, lse) with return_lse. A row that sees no key
        gets out 0 and lse -inf.

    Raises:
        ValueError naming the argument: shapes, dtypes or devices that disagree, a block-table
        entry outside [0, num_pages) for a page a sequence uses, cache_seqlens beyond the
        capacity, an append that would overflow it (nothing is written then, the cache
        included). On CUDA these value checks copy cache_seqlens and block_table to the host
        (a synchronisation); KVCachePlan.run skips them.
    """
    k_new = _one_of(k_new, k, "k_new", "k")
    v_new = _one_of(v_new, v, "v_new", "v")
    window = _flash_window(window, window_size, causal)
    return_lse = return_lse or return_softmax_lse
    if isinstance(k_cache, _cooperative.CooperativeKVCache):
        # A cache spanning device and pinned host memory (docs/long-context.md): v_cache is the
        # sequence id; its lengths and pages are the cache's own.
        if window is not None and causal and tuple(window) == (-1, 0):
            window = None  # flash_attn_with_kvcache's window_size=(-1, -1) with causal: no window
        for name, value in (("cache_seqlens", cache_seqlens), ("block_table", block_table), ("window", window)):
            if value is not None:
                raise ValueError(f"{name}: expected None with a CooperativeKVCache (it keeps its own lengths and "
                                 f"pages; windows are not supported), got {value!r}")
        return _cooperative.attention_with_cooperative_cache(
            q, k_cache, v_cache, k_new, v_new, causal=causal, softmax_scale=softmax_scale, softcap=softcap,
            return_lse=return_lse, out=out, num_threads=num_threads)
    if cache_seqlens is None:
        cache_seqlens = _full_seqlens(q, k_cache, block_table, k_new is not None or v_new is not None)
    fw = _arrays.framework_of(q)
    q = fw.adopt(q)
    options = call_options(causal, window, softmax_scale, softcap, None, None, "bottom_right", backend,
                           num_threads, False, fw.cuda_stream(q), fw.is_bf16_storage(q))
    # _lse_shape None where q's rank is wrong, which the library reports.
    out, out_arg, lse, lse_arg = _arrays.outputs(fw, q, out, _lse_shape(q) if return_lse else None)
    appending = k_new is not None or v_new is not None
    export = _arrays.export
    _C.attention_with_kv_cache(export(q), _cache_arg(k_cache, "k_cache", appending),
                               _cache_arg(v_cache, "v_cache", appending), export(_seqlens(cache_seqlens, q, fw)),
                               export(block_table), export(k_new), export(v_new), out_arg, lse_arg, options)
    if return_lse:
        return fw.finish(out, q), fw.finish(lse, q)
    return fw.finish(out, q)


class KVCachePlan:
    """A KV-cache call planned once for its shapes (split counts, kernel, scratch), run many times.

    Build it from example arrays of the calls it will serve (only their shapes, dtype and device
    are read), then call ``run`` with the arrays of each step::

        plan = fastattn.KVCachePlan(q, k_cache, v_cache, cache_seqlens, block_table, causal=True)
        for step in range(steps):
            out = plan.run(q, k_cache, v_cache, cache_seqlens, block_table, out=out)

    ``run`` checks the arrays against the planned shapes but not the values of cache_seqlens and
    block_table (out-of-range values are clamped, never read or written outside the cache), and
    makes no allocation (with ``out=`` and ``lse=``), no host decision and no synchronisation:
    on CUDA it can be captured in a CUDA graph (torch.cuda.graph) and replayed while
    cache_seqlens and block_table change on the device, bitwise equal to ``run`` outside the
    graph. An eager attention_with_kv_cache call equals a plan with ``max_cache_len`` = its
    longest cache (cache_seqlens + seqlen_new), bit for bit.

    Args:
        q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new: arrays shaped like the
            calls' (k_new / v_new: given when the calls append, with their seqlen_new).
        causal, window, softcap, softmax_scale, backend, num_threads: as attention_with_kv_cache,
            fixed for the plan; k, v, window_size, return_softmax_lse: flash_attn_with_kvcache's
            names, as there.
        return_lse: run returns (out, lse).
        max_cache_len: the longest cache (cache_seqlens + seqlen_new) the runs will see; sizes
            the key splits. 0: the capacity. Longer caches still run correctly.
    """

    def __init__(
        self,
        q: Any,
        k_cache: Any,
        v_cache: Any,
        cache_seqlens: Any = None,
        block_table: Any = None,
        k_new: Any = None,
        v_new: Any = None,
        *,
        k: Any = None,
        v: Any = None,
        causal: bool = False,
        window: Window = None,
        window_size: Any = None,
        softcap: float = 0.0,
        softmax_scale: Optional[float] = None,
        return_lse: bool = False,
        return_softmax_lse: bool = False,
        max_cache_len: int = 0,
        backend: str = "auto",
        num_threads: int = 0,
    ) -> None:
        k_new = _one_of(k_new, k, "k_new", "k")
        v_new = _one_of(v_new, v, "v_new", "v")
        window = _flash_window(window, window_size, causal)
        return_lse = return_lse or return_softmax_lse
        if cache_seqlens is None:
            cache_seqlens = _full_seqlens(q, k_cache, block_table, k_new is not None or v_new is not None)
        fw = _arrays.framework_of(q)
        q = fw.adopt(q)
        self._framework = fw
        self._return_lse = bool(return_lse)
        self._bf16 = fw.is_bf16_storage(q)
        options = call_options(causal, window, softmax_scale, softcap, None, None, "bottom_right", backend,
                               num_threads, False, fw.cuda_stream(q), self._bf16)
        export = _arrays.export
        self._plan = _C.KVCachePlan(export(q), export(k_cache), export(v_cache),
                                    export(_seqlens(cache_seqlens, q, fw)), export(block_table), export(k_new),
                                    export(v_new), self._return_lse, int(max_cache_len), options)

    @property
    def choice(self) -> "_C.KernelChoice":
        """The kernel run() launches and why (a KernelChoice)."""
        return self._plan.choice

    @property
    def shape(self) -> Dict[str, Any]:
        """The shape the plan serves: dtype, device, batch, seqlen_q, heads, cache geometry."""
        return self._plan.shape

    def run(
        self,
        q: Any,
        k_cache: Any,
        v_cache: Any,
        cache_seqlens: Any = None,
        block_table: Any = None,
        k_new: Any = None,
        v_new: Any = None,
        *,
        k: Any = None,
        v: Any = None,
        out: Any = None,
        lse: Any = None,
    ) -> Union[Any, Tuple[Any, Any]]:
        """One call with the plan: out (or (out, lse) with return_lse). Pass ``out=`` (and
        ``lse=``) to write into fixed buffers, as a CUDA graph capture needs. Runs on the current
        stream of q's framework (torch: torch.cuda.current_stream()). k, v: k_new, v_new under
        flash_attn_with_kvcache's names; cache_seqlens None: every cache full."""
        if k is not None or v is not None:
            k_new = _one_of(k_new, k, "k_new", "k")
            v_new = _one_of(v_new, v, "v_new", "v")
        if cache_seqlens is None:
            cache_seqlens = _full_seqlens(q, k_cache, block_table, k_new is not None or v_new is not None)
        fw = self._framework
        if out is None:
            out = fw.empty_like(q)
            out_arg = fw.export(out)
        else:
            out_arg = _arrays.export_output(out, "out")
        lse_arg = None
        if self._return_lse:
            if lse is None:
                shape = _lse_shape(q)
                lse = fw.empty(q, shape, float32=True) if shape is not None else None
                lse_arg = fw.export(lse) if lse is not None else None
            else:
                lse_arg = _arrays.export_output(lse, "lse")
        appending = k_new is not None or v_new is not None
        export = _arrays.export
        self._plan.run(export(q), _cache_arg(k_cache, "k_cache", appending), _cache_arg(v_cache, "v_cache", appending),
                       export(_seqlens(cache_seqlens, q, fw)), export(block_table), export(k_new), export(v_new),
                       out_arg, lse_arg,
                       fw.cuda_stream(q), self._bf16)
        if self._return_lse:
            return fw.finish(out, q), fw.finish(lse, q)
        return fw.finish(out, q)
