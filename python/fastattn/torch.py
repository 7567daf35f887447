"""PyTorch integration: fastattn as a torch custom op with autograd and torch.compile support.

    import fastattn.torch
    out = fastattn.torch.attention(q, k, v, causal=True)   # q: [batch, seqlen, heads, head_dim]
    out.sum().backward()                                    # q.grad, k.grad, v.grad

Layout: fastattn (like flash-attn) is [batch, seqlen, heads, head_dim]; torch's
scaled_dot_product_attention is [batch, heads, seqlen, head_dim]. ``attention(q, k, v)`` equals
``sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)``.

Two custom ops, ``torch.ops.fastattn.forward`` and ``torch.ops.fastattn.backward``, are
registered with ``torch.library.custom_op``. Each has a fake (meta) implementation, so
torch.compile traces them as single graph nodes without graph breaks, and the forward op's
gradient is registered with ``register_autograd``. ``AttentionFunction`` is the same pair as a
``torch.autograd.Function`` for code that wants ``.apply``. Calls on CUDA tensors run on the
current torch stream.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import torch.utils.dlpack
from torch import Tensor

from . import _C
from ._api import _BACKENDS, _enum, call_options, window_bounds

__all__ = ["attention", "AttentionFunction", "merge_states"]


# The raw cudaStream_t of the current stream, without a torch.cuda.Stream object per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(device_index: int) -> int:
    if _raw_stream is not None:
        return _raw_stream(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def _options(q: Tensor, causal, window_left, window_right, scale, softcap, max_seqlen_q,
             max_seqlen_k, alignment, backend, num_threads, deterministic) -> "_C.CallOptions":
    stream = _current_stream(q.device.index) if q.is_cuda else 0
    return call_options(causal, (window_left, window_right), scale, softcap, max_seqlen_q,
                        max_seqlen_k, alignment, backend, num_threads, deterministic, stream, False)


# DLPack capsules: cheaper than Tensor.__dlpack__ and indifferent to requires_grad.
_capsule = torch.utils.dlpack.to_dlpack


def _lse_shape(q: Tensor, varlen: bool) -> Tuple[int, ...]:
    if varlen:
        return (q.shape[1], q.shape[0])  # [num_heads, total_q]
    if q.dim() != 4:  # let the library report the rank; any lse shape will do meanwhile
        return (0,)
    return (q.shape[0], q.shape[2], q.shape[1])  # [batch, num_heads, seqlen_q]


def _optional_capsule(x: Optional[Tensor]):
    return None if x is None else _capsule(x)


# ---- the custom ops ---------------------------------------------------------------------------
# Outputs are fresh contiguous tensors (never aliases of inputs), as custom ops require; the
# fake implementations allocate exactly the same shapes, dtypes and strides.

@torch.library.custom_op("fastattn::forward", mutates_args=())
def _forward_op(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
    causal: bool, window_left: int, window_right: int, scale: Optional[float], softcap: float,
    max_seqlen_q: int, max_seqlen_k: int, alignment: str, backend: str, num_threads: int,
    deterministic: bool,
) -> Tuple[Tensor, Tensor]:
    options = _options(q, causal, window_left, window_right, scale, softcap, max_seqlen_q,
                       max_seqlen_k, alignment, backend, num_threads, deterministic)
    out = q.new_empty(q.shape)
    lse = q.new_empty(_lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)
    _C.run_forward(_capsule(q), _capsule(k), _capsule(v), _capsule(out),
                   _capsule(lse) if q.dim() in (3, 4) else None, _optional_capsule(cu_seqlens_q),
                   _optional_capsule(cu_seqlens_k), options)
    return out, lse


@_forward_op.register_fake
def _forward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, window_left, window_right, scale,
                  softcap, max_seqlen_q, max_seqlen_k, alignment, backend, num_threads,
                  deterministic):
    out = q.new_empty(q.shape)
    lse = q.new_empty(_lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("fastattn::backward", mutates_args=())
def _backward_op(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], causal: bool,
    window_left: int, window_right: int, scale: Optional[float], softcap: float,
    max_seqlen_q: int, max_seqlen_k: int, alignment: str, backend: str, num_threads: int,
    deterministic: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    options = _options(q, causal, window_left, window_right, scale, softcap, max_seqlen_q,
                       max_seqlen_k, alignment, backend, num_threads, deterministic)
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    _C.backward(_capsule(dout), _capsule(q), _capsule(k), _capsule(v), _capsule(out),
                _capsule(lse), _capsule(dq), _capsule(dk), _capsule(dv),
                _optional_capsule(cu_seqlens_q), _optional_capsule(cu_seqlens_k), options, False)
    return dq, dk, dv


@_backward_op.register_fake
def _backward_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, causal, window_left,
                   window_right, scale, softcap, max_seqlen_q, max_seqlen_k, alignment, backend,
                   num_threads, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


# ---- autograd ---------------------------------------------------------------------------------
_N_OPTIONS = 11  # forward op arguments after (q, k, v, cu_seqlens_q, cu_seqlens_k)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k = inputs[:5]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.options = inputs[5:]


def _gradients(ctx, dout: Tensor, dlse: Optional[Tensor]):
    # lse is treated as a constant: its gradient (dlse) is dropped, as in flash-attn.
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    if dout.stride(-1) != 1:  # e.g. the expanded ones of out.sum(): head_dim must be contiguous
        dout = dout.contiguous()
    dq, dk, dv = _backward_op(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *ctx.options)
    return (dq, dk, dv, None, None) + (None,) * _N_OPTIONS


_forward_op.register_autograd(_gradients, setup_context=_setup_context)


def _op_arguments(causal, window, scale, softcap, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, alignment, backend, num_threads, deterministic):
    left, right = window_bounds(window)
    return (cu_seqlens_q, cu_seqlens_k, bool(causal), left, right,
            None if scale is None else float(scale), float(softcap), int(max_seqlen_q or 0),
            int(max_seqlen_k or 0), str(alignment), str(backend), int(num_threads),
            bool(deterministic))


# ---- the eager inference path ------------------------------------------------------------------
# torch's custom-op dispatcher costs ~20 us per call (CPU tensors here, ~25 us on the H200 host):
# more than the whole C++ call of a decode-sized problem. A call that records no gradient and is
# not being traced needs none of what it provides (autograd, fake tensors, tracing), so it goes to
# the extension directly: same options, same validation (the C++ library's), the same fresh
# contiguous output, and no lse unless asked for.
_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


# functorch's current transform level (None: no vmap / grad / jvp / functionalize is running) and
# the depth of the dispatch / function mode stacks (FakeTensorMode, FlopCounterMode, ...): the
# custom op handles all of these (batching rules, fake tensors, counting modes) and a direct call
# would bypass them. Private torch functions, looked up once; a torch without them keeps every
# call on the general path rather than risk bypassing a transform it cannot see.
_functorch_level = getattr(getattr(torch._C, "_functorch", None), "maybe_current_level", None)
# (The name is torch._C._len_torch_dispatch_stack: a wrong name here silently sends every call
# through the ~25 us custom op; tests/python/test_torch_eager.py asserts _plain_context(), where
# torch is installed.)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
_function_modes = getattr(torch._C, "_is_torch_function_mode_enabled", None)
_MODES_VISIBLE = None not in (_functorch_level, _dispatch_modes, _function_modes)


def _plain_context() -> bool:
    """True when no functorch transform and no dispatch or function mode is active."""
    return (_MODES_VISIBLE and _functorch_level() is None and _dispatch_modes() == 0
            and not _function_modes())
_contiguous = torch.contiguous_format
_empty_like = torch.empty_like


def _forward_eager(q: Tensor, k: Tensor, v: Tensor, causal, window, scale, softcap, cu_seqlens_q,
                   cu_seqlens_k, max_seqlen_q, max_seqlen_k, alignment, return_lse, backend,
                   num_threads):
    stream = _current_stream(q.get_device()) if q.is_cuda else 0
    options = call_options(causal, window, scale, softcap, max_seqlen_q, max_seqlen_k, alignment,
                           backend, num_threads, False, stream, False)
    # empty_like with contiguous_format: the cheapest allocation call (about a third of
    # torch.empty(shape, dtype=, device=)), and contiguous whatever q's strides.
    out = _empty_like(q, memory_format=_contiguous)
    if not return_lse:
        _C.run_forward(_capsule(q), _capsule(k), _capsule(v), _capsule(out), None,
                       None if cu_seqlens_q is None else _capsule(cu_seqlens_q),
                       None if cu_seqlens_k is None else _capsule(cu_seqlens_k), options)
        return out
    lse = q.new_empty(_lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32)
    _C.run_forward(_capsule(q), _capsule(k), _capsule(v), _capsule(out),
                   _capsule(lse) if q.dim() in (3, 4) else None, _optional_capsule(cu_seqlens_q),
                   _optional_capsule(cu_seqlens_k), options)
    return out, lse


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    window: Optional[Tuple[int, int]] = None,
    scale: Optional[float] = None,
    softcap: float = 0.0,
    cu_seqlens_q: Optional[Tensor] = None,
    cu_seqlens_k: Optional[Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    alignment: str = "bottom_right",
    return_lse: bool = False,
    backend: str = "auto",
    num_threads: int = 0,
    deterministic: bool = False,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Differentiable exact attention on torch tensors; traceable by torch.compile.

    q: [batch, seqlen_q, num_heads, head_dim]; k, v: [batch, seqlen_k, num_kv_heads, head_dim]
    (varlen: [total, heads, head_dim] with int32 cu_seqlens_q/k [batch + 1]). Options as in
    fastattn.attention; ``deterministic`` applies to the backward pass. Returns out (like q,
    contiguous), or (out, lse) with return_lse, lse float32 [batch, num_heads, seqlen_q]
    (varlen: [num_heads, total_q]). Gradients flow to q, k, v (not through lse).

    A call that records no gradient (torch.no_grad / inference_mode, or inputs that do not
    require grad) outside torch.compile calls the library directly instead of through the custom
    op: the same result for a fraction of the host time.
    """
    # The eager path when nothing needs the custom op: not traced by torch.compile, plain tensors
    # (not a subclass such as FakeTensor or DTensor), no gradient to record, no functorch
    # transform (vmap / grad / functionalize: their tensors are plain torch.Tensor wrappers) and
    # no dispatch or function mode on the stack. Inline: one more Python call is a measurable
    # part of a tiny call.
    if (not _is_compiling() and type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor
            and not (_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
            and _plain_context()):
        return _forward_eager(q, k, v, causal, window, scale, softcap, cu_seqlens_q, cu_seqlens_k,
                              max_seqlen_q, max_seqlen_k, alignment, return_lse, backend,
                              num_threads)
    args = _op_arguments(causal, window, scale, softcap, cu_seqlens_q, cu_seqlens_k,
                         max_seqlen_q, max_seqlen_k, alignment, backend, num_threads,
                         deterministic)
    out, lse = _forward_op(q, k, v, *args)
    return (out, lse) if return_lse else out


class AttentionFunction(torch.autograd.Function):
    """``AttentionFunction.apply(q, k, v, causal=False, window=None, scale=None, softcap=0.0)``:
    the fastattn custom ops as a torch.autograd.Function (padded batches; returns out)."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, window=None, scale=None, softcap=0.0):
        args = _op_arguments(causal, window, scale, softcap, None, None, None, None,
                             "bottom_right", "auto", 0, False)
        out, lse = _forward_op(q, k, v, *args)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = args
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dout = dout if dout.stride(-1) == 1 else dout.contiguous()
        dq, dk, dv = _backward_op(dout, q, k, v, out, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None


# ---- merge_states -----------------------------------------------------------------------------
# A custom op (fresh outputs, a fake implementation) so torch.compile traces it as one node.
# No gradient is registered: merging is an inference building block (cascade / shared-prefix
# attention, split KV); for training, differentiate through attention on the whole key set.

@torch.library.custom_op("fastattn::merge_states", mutates_args=())
def _merge_states_op(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor, backend: str,
                     num_threads: int) -> Tuple[Tensor, Tensor]:
    out = torch.empty_like(out_a, memory_format=torch.contiguous_format)
    lse = torch.empty(lse_a.shape, dtype=torch.float32, device=out_a.device)
    stream = _current_stream(out_a.device.index) if out_a.is_cuda else 0
    _C.merge_states(_capsule(out_a), _capsule(lse_a), _capsule(out_b), _capsule(lse_b),
                    _capsule(out), _capsule(lse), _enum(_BACKENDS, backend, "backend"),
                    int(num_threads), stream, False, False)
    return out, lse


@_merge_states_op.register_fake
def _merge_states_fake(out_a, lse_a, out_b, lse_b, backend, num_threads):
    out = torch.empty_like(out_a, memory_format=torch.contiguous_format)
    return out, lse_a.new_empty(lse_a.shape, dtype=torch.float32)


def merge_states(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor, *,
                 backend: str = "auto", num_threads: int = 0) -> Tuple[Tensor, Tensor]:
    """fastattn.merge_states on torch tensors, traceable by torch.compile (no autograd).

    out_a, out_b: [batch, seqlen_q, num_heads, head_dim] (varlen [total_q, heads, head_dim]),
    lse_a, lse_b: float32 [batch, num_heads, seqlen_q] (varlen [num_heads, total_q]), e.g. from
    ``attention(q, k_part, v_part, return_lse=True)`` on two disjoint key sets. Returns
    (out, lse) of attention over both key sets: new contiguous tensors, on the current stream.
    For an in-place merge use ``fastattn.merge_states(..., out=out_a, lse=lse_a)``.
    """
    return _merge_states_op(out_a, lse_a, out_b, lse_b, str(backend), int(num_threads))
