"""HuggingFace transformers: ``attn_implementation="fastattn"``.

    import fastattn.integrations.transformers as fastattn_hf
    fastattn_hf.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fastattn")
    model.set_attn_implementation("fastattn")          # or switch a model already built

``register()`` adds one name to two transformers registries (transformers >= 5):

* ``AttentionInterface``: ``attention_forward``, which every attention layer calls with query
  ``[batch, heads, seqlen_q, head_dim]`` and key/value ``[batch, kv_heads, seqlen_k, head_dim]``
  (for decode, the whole cache of that layer), and which returns ``[batch, seqlen_q, heads,
  head_dim]``, as transformers' own flash-attention and SDPA functions do.
* ``AttentionMaskInterface``: ``attention_mask``, which the model calls once per forward to build
  the mask that its layers then receive. Without it transformers would give a registered function
  no mask at all, so padding would be silently ignored.

What the layers receive as ``attention_mask``, and what fastattn does with it:

* ``None``: causal attention where every key is a real token (no padding, a cache without free
  slots): one dense call, causal masks aligned bottom-right (the queries are the last tokens).
* a boolean ``[batch, kv_len]`` tensor (True: a real token), carrying a ``_fastattn`` attribute
  (``MaskInfo``) when ``attention_mask`` made it: padding, a static cache's free slots, a sliding
  window or a bidirectional pattern. Padded batches are packed (the real tokens of each row
  gathered) and run through fastattn's variable-length path; the outputs of padding queries are
  0. The packing is worked out once per forward, on the first layer, and reused by the others.
* a 4-D mask: a pattern fastattn has no kernel for (an or/and overlay such as bidirectional image
  tokens, packed sequences found from position_ids, chunked or blockwise attention), or a mask the
  caller built. Those layers run transformers' SDPA function with that mask, after a one-time
  warning: slower, never wrong.

Other arguments: ``scaling`` is the softmax scale; GQA needs nothing (fastattn reads KV head
``h // (heads // kv_heads)``, no ``repeat_kv`` copy); ``softcap`` (Gemma 2) and ``sliding_window``
are fastattn options; ``dropout`` > 0 raises (fastattn is exact attention; call ``model.eval()``),
as do attention sinks (``s_aux``) and additive biases (``position_bias``). With
``output_attentions`` no weights are returned (as with SDPA).

Static caches: the keys are the cache's whole capacity and ``attention_mask`` marks the filled
slots. Without padding (the case of a decode loop captured in a CUDA graph) the layers run
fastattn's KV-cache attention (``fastattn.KVCachePlan``) on the cache in place, with the filled
length kept on the device as ``cache_seqlens``: the query heads sharing a KV head are packed as
rows of one tile (GQA), the keys split across the SMs, no host synchronisation, at any batch, so
a decode step can be captured in a CUDA graph and replayed while the cache grows. For decode
and speculative decoding (at most 16 query tokens) one plan per shape (batch, query length,
heads, cache capacity, dtype, device, mask options) is made on the first call and kept
(``_KV_PLANS``, never evicted); run one step eagerly before capturing, as the plan's device
scratch is allocated when it is made. A longer query over a device length (a prefill into the
static cache) is an eager KV-cache call, which on CUDA reads the length back once per call.
With padding, building the packing reads a few numbers back once per forward, like
transformers' flash-attention path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from .. import torch as _fat

__all__ = ["NAME", "MaskInfo", "attention_forward", "attention_mask", "register"]

NAME = "fastattn"
_log = logging.getLogger(__name__)
_warned: set = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        _log.warning(message)


def register(name: str = NAME) -> str:
    """Registers fastattn with transformers under ``name``; returns the name to pass as
    ``attn_implementation``. Raises ImportError when transformers (>= 5) is not installed."""
    message = ("fastattn.integrations.transformers.register: needs transformers >= 5 "
               "(AttentionInterface, masking_utils.AttentionMaskInterface with q_length / "
               "q_offset); pip install 'transformers>=5'")
    try:
        import transformers
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:
        raise ImportError(message) from e
    if int(transformers.__version__.split(".")[0]) < 5:
        raise ImportError(f"{message}; found transformers {transformers.__version__}")
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    return name


# ---- the mask, once per forward ---------------------------------------------------------------

@dataclass
class MaskInfo:
    """What a ``[batch, kv_len]`` mask made by ``attention_mask`` means.

    kind: "all" (every key a real token; the mask carries the pattern only), "prefix" (the first
    ``used`` keys of every row are real, the rest a static cache's free slots) or "padding"
    (any boolean pattern). causal, window: the model's pattern; window is transformers' sliding
    window (causal: key j visible from query i when i - window < j <= i; bidirectional: when
    |i - j| <= window). used: "prefix" only, an int or a 0-d device tensor.
    """

    kind: str
    causal: bool
    window: Optional[int] = None
    used: Union[int, Tensor, None] = None
    cache_seqlens: Optional[Tensor] = None  # "prefix" with a device `used`: int32 [batch] of used
    plans: Dict[tuple, "_Packing"] = field(default_factory=dict)  # "padding": per layer shape


def _closure(fn) -> Dict[str, Any]:
    cells = fn.__closure__ or ()
    return {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, cells)}


def _pattern(mask_function) -> Optional[Tuple[bool, Optional[int]]]:
    """(causal, sliding window) of one of transformers' plain mask functions; None for anything
    else (overlays, packed sequences, chunks, blocks, user functions)."""
    from transformers import masking_utils as mu

    if mask_function is None or mask_function is mu.causal_mask_function:
        return True, None
    if mask_function is mu.bidirectional_mask_function:
        return False, None
    if getattr(mask_function, "__qualname__", "") != "and_masks.<locals>.and_mask":
        return None
    parts = _closure(mask_function).get("mask_functions", ())
    if len(parts) != 2:
        return None
    overlay, base = parts
    name = getattr(overlay, "__qualname__", "")
    window = _closure(overlay).get("sliding_window") if callable(overlay) else None
    if not isinstance(window, int):
        return None
    if name == "sliding_window_overlay.<locals>.inner_mask" and base is mu.causal_mask_function:
        return True, window
    if (name == "sliding_window_bidirectional_overlay.<locals>.inner_mask"
            and base is mu.bidirectional_mask_function):
        return False, window
    return None


def _with_info(mask: Tensor, info: MaskInfo) -> Tensor:
    mask._fastattn = info  # the same tensor object reaches every layer of this forward
    return mask


def attention_mask(batch_size: int, q_length: int, kv_length: int,
                   q_offset: Union[int, Tensor] = 0,
                   kv_offset: int = 0, mask_function=None,
                   attention_mask: Optional[Tensor] = None, **kwargs) -> Optional[Tensor]:
    """transformers' mask function for "fastattn" (AttentionMaskInterface); see the module doc.

    q_length queries at positions q_offset.. attend over kv_length key slots starting at position
    kv_offset; attention_mask is the 2-D padding mask (True: real token) over positions 0.. or None.
    """
    pattern = _pattern(mask_function)
    if pattern is None:
        # No fastattn kernel for this pattern: the exact boolean mask, for the SDPA fallback.
        from transformers.masking_utils import sdpa_mask

        kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
        return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                         q_offset=q_offset, kv_offset=kv_offset, mask_function=mask_function,
                         attention_mask=attention_mask, **kwargs)
    causal, window = pattern
    if attention_mask is not None:
        # Padding over positions 0..; the layers' keys are the last kv_length positions (a
        # sliding cache drops the oldest), or fewer than kv_length for a static cache, whose
        # free slots lie past the mask's end.
        mask = attention_mask[:, -kv_length:]
        return _with_info(mask, MaskInfo("padding", causal, window))
    device = kwargs.get("device", "cpu")
    used = q_offset + q_length - kv_offset  # real keys: past tokens kept, plus the new ones
    if not isinstance(used, Tensor) and used >= kv_length:
        if causal and window is None:
            return None
        mask = torch.ones(batch_size, kv_length, dtype=torch.bool, device=device)
        return _with_info(mask, MaskInfo("all", causal, window))
    # A static cache: slots [used, kv_length) are free. Everything here stays on the device, so a
    # forward that builds it can be captured in a CUDA graph while `used` grows.
    info = MaskInfo("prefix", causal, window, used=used)
    slots = torch.arange(kv_length, device=device)
    mask = (slots < used).expand(batch_size, kv_length)
    if isinstance(used, Tensor):
        # The KV-cache call's lengths, once per forward for every layer: device ops only.
        used_i32 = torch.as_tensor(used, device=device).to(torch.int32).reshape(1)
        info.cache_seqlens = used_i32.expand(batch_size).contiguous()
    return _with_info(mask, info)


# ---- the attention, once per layer ------------------------------------------------------------

@dataclass
class _Packing:
    """How the real tokens of a padded batch are packed for fastattn's variable-length path."""

    key_index: Tuple[Tensor, Tensor]            # (row, position) of each real key
    query_index: Optional[Tuple[Tensor, Tensor]]  # same for queries; None: every query kept
    cu_seqlens_q: Tensor
    cu_seqlens_k: Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    all_real: bool  # no padding at all: a dense call on the mask's key range


def _packing(mask: Tensor, q_length: int, causal: bool, windowed: bool) -> _Packing:
    """Packs a [batch, mask_len] mask of real keys, the queries being its last q_length slots.

    Queries are packed too where causal: a padding query has no place in the bottom-right
    alignment. fastattn's causal mask on packed rows is then exact, since the queries are the
    last tokens; a sliding window counts packed positions, so it is exact only where each row's
    real tokens are contiguous (left or right padding), which is checked.
    """
    if mask.dtype != torch.bool:
        mask = mask != 0
    batch, mask_len = mask.shape
    if causal and mask_len < q_length:
        raise ValueError(f"attention_mask: expected at least seqlen_q = {q_length} positions, "
                         f"got {mask_len}")
    i32 = torch.int32
    seqlens_k = mask.sum(1, dtype=i32)
    facts = [seqlens_k.max(), mask.all()]
    query_mask = mask[:, mask_len - q_length:] if causal and q_length > 1 else None
    if query_mask is not None:
        seqlens_q = query_mask.sum(1, dtype=i32)
        facts.append(seqlens_q.max())
    if windowed:  # contiguous: at most one start of a run of real tokens per row
        starts = mask[:, 1:] & ~mask[:, :-1]
        facts.append((starts.sum(1) + mask[:, 0]).max())
    facts = torch.stack([f.to(torch.int64) for f in facts]).tolist()  # one host read
    max_k, all_real = int(facts[0]), bool(facts[1])
    if windowed and facts[-1] > 1:
        raise NotImplementedError(
            "fastattn: a sliding window over a padding mask with gaps inside a row (real tokens "
            "after padding after real tokens) is not supported; pad on one side only")
    zero = torch.zeros(1, dtype=i32, device=mask.device)
    cu_k = torch.cat([zero, seqlens_k.cumsum(0, dtype=i32)])
    if query_mask is not None:
        query_index = query_mask.nonzero(as_tuple=True)
        cu_q = torch.cat([zero, seqlens_q.cumsum(0, dtype=i32)])
        max_q = int(facts[2])
    else:
        query_index = None
        cu_q = torch.arange(0, (batch + 1) * q_length, q_length, dtype=i32, device=mask.device)
        max_q = q_length
    return _Packing(mask.nonzero(as_tuple=True), query_index, cu_q, cu_k, max_q, max_k,
                    all_real)


def _check_kwargs(dropout: float, kwargs: Dict[str, Any]) -> None:
    if dropout:
        raise ValueError(
            f"fastattn: dropout={dropout}: attention dropout is not supported (fastattn computes "
            "exact attention); call model.eval() or set the config's attention_dropout to 0")
    for name, what in (("s_aux", "attention sinks"), ("position_bias", "an additive bias")):
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"fastattn: {name}: {what} is not supported; "
                                      "use attn_implementation='sdpa' or 'eager' for this model")
    if kwargs.get("output_attentions"):
        _warn_once("output_attentions", "fastattn does not return attention weights "
                   "(output_attentions=True): they are None")


def _sdpa_fallback(module, query, key, value, mask, dropout, scaling, is_causal, softcap, kwargs):
    if softcap:
        raise NotImplementedError(
            "fastattn: this layer's mask has no fastattn kernel (4-D mask) and the SDPA fallback "
            "has no softcap; use attn_implementation='eager'")
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    _warn_once("sdpa", "fastattn: a 4-D attention mask (a pattern fastattn has no kernel for, "
               "or one the caller built): these layers run transformers' SDPA attention")
    return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout,
                                  scaling=scaling, is_causal=is_causal, **kwargs)


def _window(mask_window: Optional[int], kwarg_window: Optional[int],
            causal: bool) -> Optional[Tuple[int, int]]:
    """fastattn's (left, right) for the model's sliding window (None: none)."""
    if mask_window is not None:
        if kwarg_window is not None and kwarg_window != mask_window:
            raise ValueError(f"fastattn: sliding_window={kwarg_window} but the layer's mask "
                             f"has a window of {mask_window}")
        # transformers' masks: causal i - w < j <= i; bidirectional |i - j| <= w.
        return (mask_window - 1, 0) if causal else (mask_window, mask_window)
    if kwarg_window is None:
        return None
    # The flash-attention convention of transformers for a window given as an argument only.
    return (kwarg_window - 1, 0) if causal else (kwarg_window - 1, kwarg_window - 1)


def attention_forward(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                      attention_mask: Optional[Tensor], dropout: float = 0.0,
                      scaling: Optional[float] = None, is_causal: Optional[bool] = None,
                      sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                      **kwargs) -> Tuple[Tensor, None]:
    """transformers' attention function for "fastattn" (AttentionInterface); see the module doc.

    query: [batch, heads, seqlen_q, head_dim]; key, value: [batch, kv_heads, seqlen_k, head_dim].
    Returns ([batch, seqlen_q, heads, head_dim], None).
    """
    _check_kwargs(dropout, kwargs)
    if attention_mask is not None and attention_mask.dim() != 2:
        return _sdpa_fallback(module, query, key, value, attention_mask, dropout, scaling,
                              is_causal, softcap, kwargs)
    info: Optional[MaskInfo] = getattr(attention_mask, "_fastattn", None)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if info is not None:
        causal = info.causal  # the model's mask pattern (config.is_causal=False gives bidirectional)
    window = _window(info.window if info is not None else None, sliding_window, causal)
    q_length, head_dim = query.shape[2], query.shape[3]
    # fastattn's layout is [batch, seqlen, heads, head_dim]: transposed views, no copies.
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    v_head_dim = v.shape[-1]
    if v_head_dim != head_dim:  # e.g. MLA: pad V to the query's head dim, crop the output
        v = torch.nn.functional.pad(v, (0, head_dim - v_head_dim))
    options = dict(causal=causal and q_length > 1, window=window, scale=scaling,
                   softcap=float(softcap or 0.0))
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None and attention_mask is None:
        out = _packed_call(q, k, v, cu_q, cu_k, kwargs, options)
    elif info is None and attention_mask is None:
        out = _fat.attention(q, k, v, **options)
    elif info is not None and info.kind == "all":
        out = _fat.attention(q, k, v, **options)
    elif info is not None and info.kind == "prefix":
        out = _prefix_call(q, k, v, info, options)
    else:
        out = _padded_call(q, k, v, attention_mask, info, window is not None, options)
    if v_head_dim != head_dim:
        out = out[..., :v_head_dim]
    return out, None


def _packed_call(q, k, v, cu_q, cu_k, kwargs, options):
    """Sequences packed into one row, with transformers' flash-attention kwargs."""
    if q.shape[0] != 1:
        raise ValueError(f"fastattn: cu_seq_lens_q/k: expected packed sequences in batch 1, "
                         f"got batch {q.shape[0]}")
    max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
    out = _fat.attention(q[0], k[0], v[0], cu_seqlens_q=cu_q.to(torch.int32),
                         cu_seqlens_k=cu_k.to(torch.int32),
                         max_seqlen_q=None if max_q is None else int(max_q),
                         max_seqlen_k=None if max_k is None else int(max_k), **options)
    return out.unsqueeze(0)


def _prefix_call(q, k, v, info: MaskInfo, options):
    """A static cache without padding: the first `used` slots of every row are real."""
    if info.cache_seqlens is None:  # `used` known on the host: a dense call on those keys
        n = int(info.used)
        return _fat.attention(q, k[:, :n], v[:, :n], **options)
    return _kv_cache_call(q, k, v, info.cache_seqlens, options)


# KV-cache plans of the static-cache route for decode-sized queries (seqlen_q <= 16: decode and
# speculative decoding, a handful of shapes), one per shape and option set, kept for the life of
# the process and never evicted: a captured CUDA graph replays a plan's kernels and scratch.
# Past _KV_PLANS_MAX shapes, and for longer queries (a prefill into the cache: a new shape per
# prompt length), the call is an eager attention_with_kv_cache, which on CUDA reads
# cache_seqlens back once per call (its value checks).
_KV_PLANS: Dict[tuple, Any] = {}
_KV_PLANS_MAX = 256
_KV_PLAN_MAX_QUERIES = 16


def _kv_cache_call(q: Tensor, k: Tensor, v: Tensor, cache_seqlens: Tensor, options) -> Tensor:
    """Attention of q [batch, seqlen_q, heads, d] over the static cache k, v [batch, capacity,
    kv_heads, d] (transposed views), its first cache_seqlens[b] slots filled (the new tokens
    included), through fastattn's KV-cache attention: no append (transformers wrote the new K/V),
    causal and window aligned to the end of each cache."""
    import fastattn

    window = options["window"]
    arguments = dict(causal=options["causal"], window=window, softmax_scale=options["scale"],
                     softcap=options["softcap"])
    key = (q.device, q.dtype, tuple(q.shape), tuple(k.shape), options["causal"], window,
           options["scale"], options["softcap"])
    plan = _KV_PLANS.get(key)
    if plan is None:
        if q.shape[1] > _KV_PLAN_MAX_QUERIES or len(_KV_PLANS) >= _KV_PLANS_MAX:
            return fastattn.attention_with_kv_cache(q, k, v, cache_seqlens, **arguments)
        plan = fastattn.KVCachePlan(q, k, v, cache_seqlens, **arguments)
        _KV_PLANS[key] = plan
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return plan.run(q, k, v, cache_seqlens, out=out)


def _padded_call(q, k, v, mask: Tensor, info: Optional[MaskInfo], windowed: bool, options):
    """A boolean [batch, mask_len] mask of real tokens over the first mask_len key slots."""
    batch, q_length, heads, head_dim = q.shape
    mask_len = mask.shape[1]
    if mask.shape[0] != batch or mask_len > k.shape[1]:
        raise ValueError(f"attention_mask: expected shape [{batch}, <= {k.shape[1]}] (batch, key "
                         f"slots), got {list(mask.shape)}")
    causal = options["causal"]
    plan_key = (q_length, causal, windowed)
    plan = info.plans.get(plan_key) if info is not None else None
    if plan is None:
        plan = _packing(mask, q_length, causal, windowed)
        if info is not None:
            info.plans[plan_key] = plan
    k, v = k[:, :mask_len], v[:, :mask_len]
    if plan.all_real:
        return _fat.attention(q, k, v, **options)
    kb, kp = plan.key_index
    k_packed, v_packed = k[kb, kp], v[kb, kp]  # [total_k, kv_heads, head_dim]
    if plan.query_index is None:
        q_packed = q.reshape(batch * q_length, heads, head_dim)
    else:
        q_packed = q[plan.query_index]
    out_packed = _fat.attention(q_packed, k_packed, v_packed, cu_seqlens_q=plan.cu_seqlens_q,
                                cu_seqlens_k=plan.cu_seqlens_k, max_seqlen_q=plan.max_seqlen_q,
                                max_seqlen_k=plan.max_seqlen_k, **options)
    if plan.query_index is None:
        return out_packed.view(batch, q_length, heads, head_dim)
    out = out_packed.new_zeros(batch, q_length, heads, head_dim)
    out[plan.query_index] = out_packed
    return out
