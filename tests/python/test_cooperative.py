"""fastattn.CooperativeKVCache / CooperativeStep / cooperative_attention in the CPU emulation
(device="cpu": the same bookkeeping, split and merge as on a GPU, every part on the CPU): the
three-way split against the float64 reference and against one fastattn.attention call, a step
reused as the sequence grows (bitwise equal to one-shot calls), new tokens, and errors."""

from __future__ import annotations

import numpy as np
import pytest

import fastattn
import reference
from conftest import BF16, as_dtype, assert_close, dtype_name, rounded

DTYPES = [np.float32, np.float16] + ([BF16] if BF16 is not None else [])
RATES = {"pcie": 50e9, "host": 80e9, "cpu": 60e9, "hbm": 4e12, "flops": 4e14, "cpuflops": 1e12}
KV_HEADS, HEADS, DIM, PAGE = 2, 8, 64, 16


def _cache(dtype, device_pages, host_pages, staging=2, max_sequences=1):
    page_bytes = 2 * PAGE * KV_HEADS * DIM * np.dtype(dtype).itemsize
    return fastattn.CooperativeKVCache(dtype={"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype_name(dtype)],
                                       num_kv_heads=KV_HEADS, head_dim=DIM, page_size=PAGE,
                                       device_budget_bytes=(device_pages + 2 * staging) * page_bytes,
                                       host_pages=host_pages, staging_pages=staging, max_sequences=max_sequences)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("length,seqlen_q", [(1000, 1), (333, 4)])
def test_split_three_ways_vs_float64_and_one_call(rng, dtype, length, seqlen_q):
    k = as_dtype(rng.standard_normal((length, KV_HEADS, DIM)), dtype)
    v = as_dtype(rng.standard_normal((length, KV_HEADS, DIM)), dtype)
    q = as_dtype(rng.standard_normal((1, seqlen_q, HEADS, DIM)), dtype)
    pages = -(-length // PAGE)
    cache = _cache(dtype, pages // 3, pages)
    cache.append(0, k[: length // 2], v[: length // 2])
    cache.append(0, k[length // 2:], v[length // 2:])
    assert cache.length(0) == length
    tiers = [cache.tier(p) for p in cache.pages(0)]
    assert tiers.count("device") == pages // 3 and tiers[-1] == "host"
    step = fastattn.CooperativeStep(q, cache, policy="stream_fraction", stream_fraction=0.5, rates=RATES)
    split = step.plan(0)
    assert split["device_pages"] > 0 and split["streamed_pages"] > 0 and split["cpu_pages"] > 0
    out, lse = step.run(q, 0, return_lse=True)
    ref_out, ref_lse = reference.forward(rounded(q, dtype), rounded(k[None], dtype), rounded(v[None], dtype))
    assert_close(out, ref_out, dtype, "out")
    assert_close(lse, ref_lse, np.float32, "lse")
    one = fastattn.attention(q, k[None], v[None])
    err = np.abs(out.astype(np.float64) - ref_out)
    err_one = np.abs(np.asarray(one).astype(np.float64) - ref_out)
    if np.dtype(dtype) == np.float32:  # f32 merge arithmetic vs f32 kernels: the usual 2x rule
        assert err.max() <= 2 * err_one.max() + 1e-6, (err.max(), err_one.max())
        return
    # Issue 18's bar for bf16 / f16 (the parts' partials are f32, rounded once after the merge):
    # the split's error is no larger than one call's, in the mean; the max may differ by a
    # rounding tie.
    assert err.mean() <= err_one.mean() * 1.01 + 1e-12, (err.mean(), err_one.mean())
    assert err.max() <= err_one.max() * 1.25 + 1e-12, (err.max(), err_one.max())


def test_step_reused_as_the_sequence_grows(rng):
    dtype = np.float16
    cache = _cache(dtype, 4, 20)
    q = as_dtype(rng.standard_normal((1, 1, HEADS, DIM)), dtype)
    step = fastattn.CooperativeStep(q, cache, policy="stream_fraction", rates=RATES)
    seen = set()
    for _ in range(8):
        k = as_dtype(rng.standard_normal((37, KV_HEADS, DIM)), dtype)
        cache.append(0, k, k[::-1].copy())
        out = step.run(q, 0)
        once = fastattn.cooperative_attention(q, cache, 0, policy="stream_fraction", rates=RATES)
        assert np.array_equal(out.view(np.uint16), once.view(np.uint16))
        split = step.plan(0)
        seen.add((split["device_pages"] > 0, split["streamed_pages"] > 0, split["cpu_pages"] > 0))
    assert (True, True, True) in seen


def test_new_tokens_causal(rng):
    dtype = np.float32
    length, n_new = 200, 3
    k = as_dtype(rng.standard_normal((length, KV_HEADS, DIM)), dtype)
    v = as_dtype(rng.standard_normal((length, KV_HEADS, DIM)), dtype)
    kn = as_dtype(rng.standard_normal((1, n_new, KV_HEADS, DIM)), dtype)
    vn = as_dtype(rng.standard_normal((1, n_new, KV_HEADS, DIM)), dtype)
    q = as_dtype(rng.standard_normal((1, n_new, HEADS, DIM)), dtype)
    cache = _cache(dtype, 3, 13)
    cache.append(0, k, v)
    out = fastattn.cooperative_attention(q, cache, 0, k_new=kn, v_new=vn, causal=True, rates=RATES)
    ref_out, _ = reference.forward(q, np.concatenate([k[None], kn], 1), np.concatenate([v[None], vn], 1), causal=True)
    assert_close(out, ref_out, dtype, "out")


def test_errors(rng):
    cache = _cache(np.float32, 1, 1)
    k = np.ones((3 * PAGE, KV_HEADS, DIM), np.float32)
    with pytest.raises(MemoryError, match="the cache is full"):
        cache.append(0, k, k)
    assert cache.length(0) == 0
    with pytest.raises(ValueError, match="dtype"):
        fastattn.CooperativeKVCache(dtype="int8", num_kv_heads=2, head_dim=64, device_budget_bytes=1 << 20, host_pages=1)
    with pytest.raises(ValueError, match="device"):
        fastattn.CooperativeKVCache(dtype="f32", num_kv_heads=2, head_dim=64, device_budget_bytes=1 << 20, host_pages=1,
                                    device="tpu")
    q = np.ones((1, 1, HEADS, DIM), np.float32)
    cache.append(0, k[:PAGE], k[:PAGE])
    step = fastattn.CooperativeStep(q, cache, rates=RATES)
    with pytest.raises(ValueError, match="q: expected shape"):
        step.run(np.ones((1, 2, HEADS, DIM), np.float32), 0)
    with pytest.raises(ValueError, match="policy"):
        fastattn.CooperativeStep(q, cache, policy="fastest", rates=RATES)
    with pytest.raises(ValueError, match="seq"):
        step.run(q, 5)


def test_attention_with_kv_cache_accepts_the_cooperative_cache(rng):
    """fastattn.attention_with_kv_cache(q, CooperativeKVCache, seq, k=..., v=...): the new token
    attended as the newest key, then appended; equal to cooperative_attention with k_new/v_new
    followed by an append, and close to the float64 reference over the whole sequence."""
    dtype = np.float32
    length, steps = 150, 5
    k = as_dtype(rng.standard_normal((length + steps, KV_HEADS, DIM)), dtype)
    v = as_dtype(rng.standard_normal((length + steps, KV_HEADS, DIM)), dtype)
    cache, twin = _cache(dtype, 3, 13), _cache(dtype, 3, 13)
    cache.append(0, k[:length], v[:length])
    twin.append(0, k[:length], v[:length])
    for s in range(steps):
        t = length + s
        q = as_dtype(rng.standard_normal((1, 1, HEADS, DIM)), dtype)
        kn, vn = k[None, t:t + 1], v[None, t:t + 1]
        out = fastattn.attention_with_kv_cache(q, cache, 0, k=kn, v=vn, causal=True)
        assert cache.length(0) == t + 1
        ref = fastattn.cooperative_attention(q, twin, 0, k_new=kn, v_new=vn, causal=True)
        twin.append(0, kn, vn)
        assert np.array_equal(out, ref)
        ref_out, _ = reference.forward(q, k[None, :t + 1], v[None, :t + 1], causal=True)
        assert_close(out, ref_out, dtype, "out")


def test_attention_with_kv_cache_cooperative_errors():
    cache = _cache(np.float32, 1, 1)  # 2 pages of 16 tokens
    k = np.ones((1, 30, KV_HEADS, DIM), np.float32)
    cache.append(0, k[0], k[0])
    q = np.ones((1, 3, HEADS, DIM), np.float32)
    out = np.full(q.shape, 7.0, np.float32)
    with pytest.raises(MemoryError, match="k_new: expected at most 2 new tokens"):
        fastattn.attention_with_kv_cache(q, cache, 0, k=k[:, :3], v=k[:, :3], out=out)
    assert cache.length(0) == 30 and np.all(out == 7.0)
    with pytest.raises(ValueError, match="block_table: expected None with a CooperativeKVCache"):
        fastattn.attention_with_kv_cache(q, cache, 0, block_table=np.zeros((1, 2), np.int32))


def test_step_times_and_refined_rates(rng):
    dtype = np.float16
    cache = _cache(dtype, 2, 20)
    k = as_dtype(rng.standard_normal((20 * PAGE, KV_HEADS, DIM)), dtype)
    cache.append(0, k, k[::-1].copy())
    q = as_dtype(rng.standard_normal((1, 1, HEADS, DIM)), dtype)
    rates = dict(RATES, cpu=RATES["pcie"] / 2)  # both host parts get pages
    step = fastattn.CooperativeStep(q, cache, rates=rates)
    split = step.plan(0)
    assert split["streamed_pages"] > 0 and split["cpu_pages"] > 0
    step.run(q, 0)
    times = step.last_times()
    assert times["gpu_s"] > 0 and times["cpu_s"] > 0 and times["step_s"] >= times["cpu_s"]
    assert step.rates()["pcie"] == rates["pcie"]  # the first run never refines (its one-off costs)
    step.run(q, 0)
    refined = step.rates()
    assert "replaced by run 2" in refined["source"]  # the emulation's "PCIe" is far below 50 GB/s
    assert refined["hbm"] == RATES["hbm"] and refined["host"] >= refined["cpu"]
    fixed = fastattn.CooperativeStep(q, cache, rates=rates, refine_rates=False)
    fixed.run(q, 0)
    assert fixed.rates()["cpu"] == rates["cpu"] and "replaced" not in fixed.rates()["source"]
