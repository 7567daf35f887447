"""fastattn.merge_states: combine two partial attention results over disjoint key sets.

Layout (as fastattn.attention's out and lse):
    out_a, out_b, out: [batch, seqlen_q, num_heads, head_dim]   varlen: [total_q, num_heads, head_dim]
    lse_a, lse_b, lse: float32 [batch, num_heads, seqlen_q]     varlen: [num_heads, total_q]
"""

from __future__ import annotations

from typing import Any, Tuple

from . import _C
from . import _arrays
from ._api import _BACKENDS, _enum


def merge_states(
    out_a: Any,
    lse_a: Any,
    out_b: Any,
    lse_b: Any,
    *,
    out: Any = None,
    lse: Any = None,
    backend: str = "auto",
    num_threads: int = 0,
) -> Tuple[Any, Any]:
    """Attention over the union of two disjoint key sets, from each set's (out, lse).

    With ``out_a, lse_a = attention(q, k_a, v_a, return_lse=True)`` and likewise for B::

        lse = log(exp(lse_a) + exp(lse_b))           (computed with a max-shift, in fp32)
        out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)

    rounded once to out_a's dtype: ``attention`` over the keys of A and B together, up to
    rounding. A side with lse = -inf (no keys) contributes nothing; both -inf give out 0 and
    lse -inf. NaN or +inf in lse_a / lse_b give NaN in that row. See docs/inference.md.

    Args:
        out_a, out_b: float32, float16 or bfloat16, one dtype and device, any strides with
            head_dim contiguous. Any DLPack array (NumPy, PyTorch, CuPy, JAX on the CPU).
        lse_a, lse_b: float32 log-sum-exp of each part (natural log).
        out, lse: write the result here instead of allocating it. ``out`` may be ``out_a`` or
            ``out_b`` itself and ``lse`` may be ``lse_a`` or ``lse_b`` (an in-place merge).
        backend: "auto", "cpu", "reference" (float64 math) or "cuda".
        num_threads: CPU threads; 0 uses OpenMP's default.

    Returns:
        (out, lse) in the framework of out_a.
    """
    fw = _arrays.framework_of(out_a)
    out_a = fw.adopt(out_a)
    if out is None:
        out = fw.empty_like(out_a)
        out_arg = fw.export(out)
    else:
        out_arg = _arrays.export_output(out, "out")
    if lse is None:
        shape = getattr(lse_a, "shape", None)
        lse = fw.empty(out_a, tuple(shape), float32=True) if shape is not None else None
        lse_arg = fw.export(lse) if lse is not None else None
    else:
        lse_arg = _arrays.export_output(lse, "lse")
    export = _arrays.export
    _C.merge_states(export(out_a), export(lse_a), export(out_b), export(lse_b), out_arg, lse_arg,
                    _enum(_BACKENDS, backend, "backend"), int(num_threads), fw.cuda_stream(out_a),
                    fw.is_bf16_storage(out_a), False)
    return fw.finish(out, out_a), (fw.finish(lse, out_a) if lse is not None else None)
