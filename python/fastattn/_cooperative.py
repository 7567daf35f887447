"""fastattn.CooperativeKVCache, fastattn.CooperativeStep and fastattn.cooperative_attention:
exact attention over a KV cache split between device memory and pinned host memory
(docs/long-context.md, issue 18).

    cache = fastattn.CooperativeKVCache(dtype="bf16", num_kv_heads=8, head_dim=128, page_size=256,
                                        device_budget_bytes=512 << 20, host_pages=4096, device="cuda:0")
    cache.append(0, k, v)                  # [tokens, kv_heads, d]: device pages first, then host
    step = fastattn.CooperativeStep(q, cache)   # q [1, seqlen_q, heads, d]: planned once
    out = step.run(q, 0)                   # GPU over device pages + GPU over streamed host pages
                                           # + CPU over the rest, merged exactly (f32), rounded once

``device="cpu"`` is the CPU emulation: the same bookkeeping, split and merge, every part on the CPU.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

from . import _C
from . import _arrays
from ._api import call_options


def _device_index(device: Any) -> int:
    text = str(device)
    if text == "cpu":
        return -1
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def _rates_text(rates: Optional[Union[str, Dict[str, float]]]) -> str:
    if rates is None:
        return ""
    if isinstance(rates, str):
        return rates
    return ",".join(f"{k}={float(v)!r}" for k, v in rates.items())


class CooperativeKVCache:
    """A KV cache whose pages live in device memory up to a budget and in pinned host memory
    beyond it; page ids are global (device pages first). See fastattn/cooperative.hpp.

    Args:
        dtype: "bf16", "f16" or "f32".
        num_kv_heads, head_dim, page_size: a page holds page_size tokens of K and of V.
        device_budget_bytes: device memory for the device pages and the two staging buffers.
        host_pages: pages in pinned host memory.
        max_sequences: sequence ids 0 .. max_sequences - 1.
        staging_pages: pages per staging buffer (0: 32 MiB of K+V).
        device: "cuda:N", or "cpu" for the CPU emulation.
    """

    def __init__(self, *, dtype: str, num_kv_heads: int, head_dim: int, device_budget_bytes: int,
                 host_pages: int, page_size: int = 256, max_sequences: int = 1, staging_pages: int = 0,
                 device: Any = "cpu") -> None:
        self.page_size = int(page_size)
        self._cache = _C.CooperativeKVCache(str(dtype), int(num_kv_heads), int(head_dim), int(page_size),
                                            int(max_sequences), int(device_budget_bytes), int(staging_pages),
                                            int(host_pages), _device_index(device))

    def append(self, seq: int, k: Any, v: Any) -> None:
        """Appends k, v ([tokens, kv_heads, d] or [1, tokens, kv_heads, d]) at sequence seq's end."""
        fw = _arrays.framework_of(k)
        k = fw.adopt(k)
        v = fw.adopt(v)
        self._cache.append(int(seq), _arrays.export(k), _arrays.export(v), fw.is_bf16_storage(k))

    def set_pages(self, seq: int, pages: List[int], length: int) -> None:
        self._cache.set_pages(int(seq), [int(p) for p in pages], int(length))

    def release(self, seq: int) -> None:
        self._cache.release(int(seq))

    def length(self, seq: int) -> int:
        return self._cache.length(int(seq))

    def pages(self, seq: int) -> List[int]:
        return self._cache.pages(int(seq))

    def tier(self, page: int) -> str:
        """'device' or 'host'."""
        return self._cache.tier(int(page))

    def free_pages(self, tier: str) -> int:
        return self._cache.free_pages(tier)

    @property
    def device_pages(self) -> int:
        return self._cache.device_pages

    @property
    def host_pages(self) -> int:
        return self._cache.host_pages

    @property
    def page_bytes(self) -> int:
        return self._cache.page_bytes

    @property
    def device_bytes(self) -> int:
        return self._cache.device_bytes


def _options(q: Any, fw: Any, causal: bool, softmax_scale: Optional[float], softcap: float,
             num_threads: int) -> "_C.CallOptions":
    return call_options(causal, None, softmax_scale, softcap, None, None, "bottom_right", "auto", num_threads,
                        False, fw.cuda_stream(q), fw.is_bf16_storage(q))


def _outputs(q: Any, fw: Any, out: Any, return_lse: bool) -> Tuple[Any, Any, Any, Any]:
    rank4 = len(tuple(q.shape)) == 4  # else the library reports q's rank
    return _arrays.outputs(fw, q, out, (1, int(q.shape[2]), int(q.shape[1])) if return_lse and rank4 else None)


class CooperativeStep:
    """The cooperative step planned once for q's shape ([1, seqlen_q, heads, d]) and a cache, run
    many times (a decode loop): plans, scratch, staging and the copy stream are made here; run()
    only chooses the split for the sequence as it is now. See fastattn/cooperative.hpp.

    Args:
        q: an array shaped like the steps' queries (its values are not read).
        cache: a CooperativeKVCache (kept alive by the step).
        causal: the step's new tokens (run's k_new / v_new) causal among themselves.
        softmax_scale, softcap: as fastattn.attention.
        policy: "auto" (the cost model), "stream_all", "cpu_all" or "stream_fraction".
        stream_fraction: the host pages streamed with policy "stream_fraction".
        parts: bits of the parts that run (1 device, 2 streamed, 4 CPU); 7: all.
        rates: the cost model's rates (a dict like {"pcie": 50e9, "host": 80e9, "cpu": 60e9,
            "hbm": 4e12, "flops": 4e14, "cpuflops": 1e12}, or that text); None: measured once
            per process (FASTATTN_COOP_RATES overrides).
        num_threads: CPU threads of the CPU part; 0: OpenMP's default.
        refine_rates: a run that shows the streamed or CPU part's rate more than 1.5x off the
            rates in use replaces them (policy "auto", all parts; CooperativeOptions::
            refine_rates). False: the split follows the start rates alone.
    """

    def __init__(self, q: Any, cache: CooperativeKVCache, *, causal: bool = False,
                 softmax_scale: Optional[float] = None, softcap: float = 0.0, policy: str = "auto",
                 stream_fraction: float = 0.5, parts: int = 7, rates: Any = None, num_threads: int = 0,
                 refine_rates: bool = True) -> None:
        fw = _arrays.framework_of(q)
        q = fw.adopt(q)
        self._framework = fw
        self._bf16 = fw.is_bf16_storage(q)
        options = _options(q, fw, causal, softmax_scale, softcap, num_threads)
        self._step = _C.CooperativeStep(_arrays.export(q), cache._cache, options, str(policy), float(stream_fraction),
                                        int(parts), _rates_text(rates), bool(refine_rates))

    def run(self, q: Any, seq: int = 0, *, k_new: Any = None, v_new: Any = None, out: Any = None,
            return_lse: bool = False) -> Union[Any, Tuple[Any, Any]]:
        """out = attention(q, sequence seq's cached tokens, then k_new / v_new if given); with
        return_lse also lse, float32 [1, heads, seqlen_q]."""
        fw = self._framework
        q = fw.adopt(q)
        out, out_arg, lse, lse_arg = _outputs(q, fw, out, return_lse)
        export = _arrays.export
        self._step.run(export(q), int(seq), out_arg, lse_arg, export(k_new), export(v_new), self._bf16)
        if return_lse:
            return fw.finish(out, q), fw.finish(lse, q)
        return fw.finish(out, q)

    def plan(self, seq: int = 0) -> Dict[str, Any]:
        """The split run() would use for seq now: pages per part, model times, and the choice."""
        return self._step.plan(int(seq))

    def last_times(self) -> Dict[str, float]:
        """What the last run took, in seconds: gpu_s (parts 1 and 2 on the stream), cpu_s (part 3),
        step_s (the whole run); 0 for parts that did not run."""
        return self._step.last_times()

    def rates(self) -> Dict[str, Any]:
        """The rates the next run's split comes from (replaced by a run's own when they were off)."""
        return self._step.rates()


def cooperative_attention(q: Any, cache: CooperativeKVCache, seq: int = 0, *, k_new: Any = None,
                          v_new: Any = None, causal: bool = False, softmax_scale: Optional[float] = None,
                          softcap: float = 0.0, policy: str = "auto", stream_fraction: float = 0.5, parts: int = 7,
                          rates: Any = None, num_threads: int = 0, out: Any = None,
                          return_lse: bool = False) -> Union[Any, Tuple[Any, Any]]:
    """One cooperative step (planned for this call only; a decode loop keeps a CooperativeStep).
    Arguments as CooperativeStep and its run."""
    fw = _arrays.framework_of(q)
    q = fw.adopt(q)
    options = _options(q, fw, causal, softmax_scale, softcap, num_threads)
    out, out_arg, lse, lse_arg = _outputs(q, fw, out, return_lse)
    export = _arrays.export
    _C.cooperative_attention(export(q), cache._cache, int(seq), out_arg, lse_arg, export(k_new), export(v_new),
                             options, str(policy), float(stream_fraction), int(parts), _rates_text(rates))
    if return_lse:
        return fw.finish(out, q), fw.finish(lse, q)
    return fw.finish(out, q)


def attention_with_cooperative_cache(q: Any, cache: CooperativeKVCache, seq: Any = 0, k_new: Any = None,
                                     v_new: Any = None, *, causal: bool = False, softmax_scale: Optional[float] = None,
                                     softcap: float = 0.0, return_lse: bool = False, out: Any = None,
                                     num_threads: int = 0, rates: Any = None) -> Union[Any, Tuple[Any, Any]]:
    """fastattn.attention_with_kv_cache over a CooperativeKVCache (batch 1, sequence ``seq``): the
    new tokens k_new / v_new ([1, seqlen_new, kv_heads, d]) are attended as the sequence's newest
    keys (causal among themselves with causal=True, aligned to the end of the cache) and then
    appended, as the KV-cache call does for a plain cache. The room for them is checked first
    (MemoryError naming k_new, nothing written); nothing is appended when the attention fails.
    The C++ overload is attention_with_kv_cache(q, CooperativeKVCache&, seq, ...)."""
    seq = 0 if seq is None else int(seq)
    if (k_new is None) != (v_new is None):
        raise ValueError("k_new, v_new: expected both or neither, got "
                         + ("k_new only" if v_new is None else "v_new only"))
    if k_new is not None:  # the cache's own room check (CooperativeKVCache::check_room): MemoryError
        cache._cache.check_room(seq, int(tuple(k_new.shape)[-3]), "k_new")
    result = cooperative_attention(q, cache, seq, k_new=k_new, v_new=v_new, causal=causal, softmax_scale=softmax_scale,
                                   softcap=softcap, rates=rates, num_threads=num_threads, out=out,
                                   return_lse=return_lse)
    if k_new is not None:
        cache.append(seq, k_new, v_new)
    return result
