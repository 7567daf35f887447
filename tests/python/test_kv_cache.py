"""fastattn.attention_with_kv_cache and fastattn.KVCachePlan: contiguous and paged caches, append,
plan/run, against the float64 NumPy reference over each sequence's keys (NumPy arrays, and torch
tensors on the CPU and CUDA where installed); the errors the issue names, word for word; a CUDA
graph of KVCachePlan.run replayed with changing cache_seqlens (torch on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

import fastattn
import reference
from conftest import BF16, CPU_BACKENDS, as_dtype, assert_close, rounded

DTYPES = [np.float32, np.float16] + ([BF16] if BF16 is not None else [])


class Cache:
    """A KV cache and a call on it: per-sequence lengths, optional pages (shuffled, spare pages,
    unused block-table slots -1), new tokens to append; float64 source values."""

    def __init__(self, rng, lens, seqlen_q=1, heads=4, kv_heads=2, dim=64, page_size=None, seqlen_new=0,
                 dtype=np.float32, spare=2):
        self.lens = np.asarray(lens, dtype=np.int32)
        self.batch = len(lens)
        self.page_size = page_size
        self.seqlen_new = seqlen_new
        self.dtype = dtype
        longest = int((self.lens + seqlen_new).max()) if self.batch else 0
        self.q = as_dtype(rng.standard_normal((self.batch, seqlen_q, heads, dim)), dtype)
        self.k_new = as_dtype(rng.standard_normal((self.batch, seqlen_new, kv_heads, dim)), dtype)
        self.v_new = as_dtype(rng.standard_normal((self.batch, seqlen_new, kv_heads, dim)), dtype)
        # Each sequence's keys after the append, float64 as the kernel sees them.
        self.keys = [rounded(rng.standard_normal((n, kv_heads, dim)), dtype) for n in self.lens]
        self.values = [rounded(rng.standard_normal((n, kv_heads, dim)), dtype) for n in self.lens]
        if page_size is None:
            capacity = longest + spare
            self.k_cache = np.full((self.batch, capacity, kv_heads, dim), np.nan).astype(dtype)
            self.v_cache = self.k_cache.copy()
            for b, n in enumerate(self.lens):
                self.k_cache[b, :n] = self.keys[b].astype(dtype)
                self.v_cache[b, :n] = self.values[b].astype(dtype)
            self.block_table = None
        else:
            used = [-(-(int(n) + seqlen_new) // page_size) for n in self.lens]
            slots = (max(used) if used else 0) + 1
            pages = rng.permutation(sum(used) + spare).astype(np.int32)
            self.block_table = np.full((self.batch, slots), -1, dtype=np.int32)
            at = 0
            for b, u in enumerate(used):
                self.block_table[b, :u] = pages[at:at + u]
                at += u
            self.k_cache = np.full((len(pages), page_size, kv_heads, dim), np.nan).astype(dtype)
            self.v_cache = self.k_cache.copy()
            for b, n in enumerate(self.lens):
                for t in range(n):
                    page, slot = self.block_table[b, t // page_size], t % page_size
                    self.k_cache[page, slot] = self.keys[b][t].astype(dtype)
                    self.v_cache[page, slot] = self.values[b][t].astype(dtype)

    def append_args(self):
        return (self.k_new, self.v_new) if self.seqlen_new else (None, None)

    def expected(self, **options):
        """(out, lse) float64 [batch, seqlen_q, heads, dim], [batch, heads, seqlen_q]."""
        outs, lses = [], []
        for b in range(self.batch):
            k = np.concatenate([self.keys[b], rounded(self.k_new[b], self.dtype)])[None]
            v = np.concatenate([self.values[b], rounded(self.v_new[b], self.dtype)])[None]
            out, lse = reference.forward(rounded(self.q[b:b + 1], self.dtype), k, v, **options)
            outs.append(out)
            lses.append(lse)
        shape = self.q.shape
        if not outs:
            return np.zeros(shape), np.zeros((0, shape[2], shape[1]))
        return np.concatenate(outs), np.concatenate(lses)

    def cache_token(self, cache, b, t):
        if self.block_table is None:
            return cache[b, t]
        return cache[self.block_table[b, t // self.page_size], t % self.page_size]


OPTION_SETS = [
    {"causal": True},
    {},
    {"causal": True, "window": (5, 0)},
    {"window": (20, 3)},
    {"causal": True, "softcap": 5.0},
]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("page_size", [None, 1, 3, 16])
@pytest.mark.parametrize("seqlen_q", [1, 4, 33])
def test_matches_reference(rng, backend, dtype, page_size, seqlen_q):
    seqlen_new = seqlen_q if seqlen_q < 33 else 5
    options = OPTION_SETS[(seqlen_q + (page_size or 0)) % len(OPTION_SETS)]
    c = Cache(rng, [17, 0, 1, 40], seqlen_q=seqlen_q, heads=14, kv_heads=2, dim=64, page_size=page_size,
              seqlen_new=seqlen_new, dtype=dtype)
    out, lse = fastattn.attention_with_kv_cache(c.q, c.k_cache, c.v_cache, c.lens, c.block_table, *c.append_args(),
                                                return_lse=True, backend=backend, **options)
    assert out.dtype == c.q.dtype and out.shape == c.q.shape and lse.dtype == np.float32
    ref_out, ref_lse = c.expected(**options)
    assert_close(out, ref_out, dtype, "out vs float64")
    assert_close(lse, ref_lse, np.float32, "lse vs float64")
    # The appended tokens are in the cache, through the block table.
    for b in range(c.batch):
        for i in range(c.seqlen_new):
            t = int(c.lens[b]) + i
            assert np.array_equal(c.cache_token(c.k_cache, b, t).view(np.uint8), c.k_new[b, i].view(np.uint8))
            assert np.array_equal(c.cache_token(c.v_cache, b, t).view(np.uint8), c.v_new[b, i].view(np.uint8))


@pytest.mark.parametrize("page_size", [None, 16])
def test_plan_run_equals_eager_bitwise(rng, page_size):
    seed = int(rng.integers(1 << 30))
    results = []
    for planned in (False, True):
        c = Cache(np.random.default_rng(seed), [300, 5, 77], seqlen_q=2, heads=8, kv_heads=2,
                  page_size=page_size, seqlen_new=2, dtype=np.float32)
        if planned:
            longest = int((c.lens + c.seqlen_new).max())
            plan = fastattn.KVCachePlan(c.q, c.k_cache, c.v_cache, c.lens, c.block_table, *c.append_args(),
                                        causal=True, return_lse=True, max_cache_len=longest)
            assert plan.shape["max_cache_len"] == longest and plan.choice.kernel.startswith("cpu.kv_cache.decode.")
            results.append(plan.run(c.q, c.k_cache, c.v_cache, c.lens, c.block_table, *c.append_args()))
        else:
            results.append(fastattn.attention_with_kv_cache(c.q, c.k_cache, c.v_cache, c.lens, c.block_table,
                                                            *c.append_args(), causal=True, return_lse=True))
    (out_a, lse_a), (out_b, lse_b) = results
    assert np.array_equal(out_a.view(np.uint8), out_b.view(np.uint8))
    assert np.array_equal(lse_a.view(np.uint8), lse_b.view(np.uint8))


def test_plan_serves_changing_seqlens_and_fixed_outputs(rng):
    c = Cache(rng, [40, 40], seqlen_q=1, heads=8, kv_heads=2, page_size=16, dtype=np.float32, spare=6)
    plan = fastattn.KVCachePlan(c.q, c.k_cache, c.v_cache, c.lens, c.block_table, causal=True, return_lse=True)
    out = np.empty_like(c.q)
    lse = np.empty((c.batch, c.q.shape[2], 1), np.float32)
    for lens in ([40, 3], [10, 33], [0, 1], [40, 40]):
        seqlens = np.asarray(lens, np.int32)
        got, got_lse = plan.run(c.q, c.k_cache, c.v_cache, seqlens, c.block_table, out=out, lse=lse)
        assert got is out and got_lse is lse
        for b, n in enumerate(lens):
            ref, ref_lse = reference.forward(c.q[b:b + 1].astype(np.float64), c.keys[b][None, :n],
                                             c.values[b][None, :n], causal=True)
            assert_close(out[b:b + 1], ref, np.float32, f"out, lens {lens}")
            assert_close(lse[b:b + 1], ref_lse, np.float32, f"lse, lens {lens}")


def test_seqlens_as_int_and_contiguous_cache_default(rng):
    c = Cache(rng, [9, 9], seqlen_q=3, heads=4, kv_heads=4, dtype=np.float16)
    out = fastattn.attention_with_kv_cache(c.q, c.k_cache, c.v_cache, 9, causal=True)
    assert_close(out, c.expected(causal=True)[0], np.float16, "out")


@pytest.mark.parametrize("page_size", [None, 3])
def test_flash_attn_with_kvcache_names(rng, page_size):
    """flash_attn_with_kvcache's keyword names (k, v, cache_seqlens, block_table, softmax_scale,
    causal, window_size, softcap, return_softmax_lse) give the same bits as fastattn's."""
    seed = int(rng.integers(1 << 30))
    make = lambda: Cache(np.random.default_rng(seed), [17, 1, 0], seqlen_q=2, heads=7, kv_heads=1,  # noqa: E731
                         page_size=page_size, seqlen_new=2, dtype=np.float32)
    a, b = make(), make()
    ours = fastattn.attention_with_kv_cache(a.q, a.k_cache, a.v_cache, a.lens, a.block_table, a.k_new, a.v_new,
                                            causal=True, window=(6, 0), softcap=4.0, softmax_scale=0.2,
                                            return_lse=True)
    theirs = fastattn.attention_with_kv_cache(b.q, b.k_cache, b.v_cache, k=b.k_new, v=b.v_new,
                                              cache_seqlens=b.lens, block_table=b.block_table,
                                              softmax_scale=0.2, causal=True, window_size=(6, -1), softcap=4.0,
                                              return_softmax_lse=True)
    for x, y in zip(ours, theirs):
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8))
    assert np.array_equal(a.k_cache.view(np.uint8), b.k_cache.view(np.uint8))  # the same append
    ref_out, ref_lse = a.expected(causal=True, window=(6, 0), softcap=4.0, scale=0.2)
    assert_close(theirs[0], ref_out, np.float32, "out vs float64")
    # The plan takes the same names, and (-1, -1) is no window.
    c = make()
    plan = fastattn.KVCachePlan(c.q, c.k_cache, c.v_cache, c.lens, c.block_table, k=c.k_new, v=c.v_new,
                                window_size=(-1, -1), return_softmax_lse=True)
    out, lse = plan.run(c.q, c.k_cache, c.v_cache, c.lens, c.block_table, k=c.k_new, v=c.v_new)
    assert_close(out, c.expected()[0], np.float32, "plan out vs float64")
    with pytest.raises(ValueError, match="k_new and k: the same argument under two names"):
        fastattn.attention_with_kv_cache(a.q, a.k_cache, a.v_cache, a.lens, a.block_table, a.k_new, a.v_new,
                                         k=a.k_new)
    with pytest.raises(ValueError, match="window and window_size"):
        fastattn.attention_with_kv_cache(a.q, a.k_cache, a.v_cache, a.lens, a.block_table, window=(1, 0),
                                         window_size=(1, 0))


def test_cache_seqlens_none_means_full(rng):
    """cache_seqlens=None (flash_attn_with_kvcache's default): every cache holds its capacity."""
    c = Cache(rng, [9, 9], seqlen_q=1, heads=4, kv_heads=2, dtype=np.float32, spare=0)
    out = fastattn.attention_with_kv_cache(c.q, c.k_cache, c.v_cache)
    assert_close(out, c.expected()[0], np.float32, "out")
    with pytest.raises(ValueError, match="cache_seqlens: expected the tokens already in each cache"):
        fastattn.attention_with_kv_cache(c.q, c.k_cache, c.v_cache, k=c.k_new, v=c.v_new)


def test_chunked_prefill_kernel_is_reported(rng):
    c = Cache(rng, [20], seqlen_q=40, heads=4, kv_heads=1, page_size=3, seqlen_new=40, dtype=np.float32)
    plan = fastattn.KVCachePlan(c.q, c.k_cache, c.v_cache, c.lens, c.block_table, *c.append_args(), causal=True)
    assert plan.choice.kernel.startswith("cpu.kv_cache.gather.")
    assert "gathered" in plan.choice.reason


# ---- errors: the argument named, nothing written ---------------------------------------------

def error_case(rng):
    return Cache(rng, [5, 9], seqlen_q=2, heads=4, kv_heads=2, page_size=4, seqlen_new=2, dtype=np.float32)


def expect_refused(c, match, **changes):
    args = dict(q=c.q, k_cache=c.k_cache, v_cache=c.v_cache, cache_seqlens=c.lens, block_table=c.block_table,
                k_new=c.k_new, v_new=c.v_new)
    args.update(changes)
    k_before, v_before = c.k_cache.copy(), c.v_cache.copy()
    out = np.full_like(c.q, np.nan)
    with pytest.raises(ValueError, match=match):
        fastattn.attention_with_kv_cache(out=out, **args)
    assert np.isnan(out).all(), "out written"
    assert np.array_equal(c.k_cache, k_before, equal_nan=True) and np.array_equal(c.v_cache, v_before, equal_nan=True)


def test_block_table_entry_out_of_range(rng):
    c = error_case(rng)
    table = c.block_table.copy()
    table[1, 2] = c.k_cache.shape[0]
    expect_refused(c, r"cache\.block_table: expected entries in \[0, num_pages = 7\) for the pages a sequence uses "
                      r"\(sequence 1 uses slots 0\.\.2\), got cache\.block_table\[1\]\[2\] = 7", block_table=table)


def test_seqlens_beyond_capacity_and_append_overflow(rng):
    c = error_case(rng)
    expect_refused(c, r"cache\.seqlens: expected values <= the capacity 16 \(max_pages_per_seq 4 x page_size 4\), "
                      r"got cache\.seqlens\[0\] = 17", cache_seqlens=np.array([17, 9], np.int32))
    expect_refused(c, r"append\.k: expected seqlen_new \(shape\[1\]\) = 2 new tokens to fit the cache after "
                      r"cache\.seqlens\[1\] = 15 .* got 15 \+ 2 = 17 tokens", cache_seqlens=np.array([5, 15], np.int32))


def test_shape_and_dtype_errors(rng):
    c = error_case(rng)
    expect_refused(c, r"cache\.v: expected shape \[7, 4, 2, 64\] \(as cache\.k\), got shape \[7, 4, 1, 64\]",
                   v_cache=np.ascontiguousarray(c.v_cache[:, :, :1]))
    expect_refused(c, r"cache\.k: expected num_kv_heads \(shape\[2\]\) dividing q's num_heads = 3",
                   q=np.ascontiguousarray(c.q[:, :, :3]))
    expect_refused(c, r"cache_seqlens: expected", cache_seqlens=c.lens.astype(np.int64))
    expect_refused(c, r"cache\.k: expected dtype f32 \(as q\), got dtype f16", k_cache=c.k_cache.astype(np.float16))
    expect_refused(c, r"v_new: expected an array, since k_new is given, got None", v_new=None)


def test_read_only_cache_is_refused_when_appending(rng):
    c = error_case(rng)
    c.k_cache.setflags(write=False)
    expect_refused(c, r"k_cache")


def test_alignment_is_not_an_option():
    with pytest.raises(TypeError):
        fastattn.attention_with_kv_cache(np.zeros((1, 1, 1, 8), np.float32), np.zeros((1, 4, 1, 8), np.float32),
                                         np.zeros((1, 4, 1, 8), np.float32), 0, alignment="top_left")


# ---- torch: CPU and CUDA, and a CUDA graph of a plan's run -----------------------------------

def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("page_size", [None, 16])
def test_torch_tensors(rng, page_size):
    torch = _torch()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and fastattn.build_info()["cuda_compiled"] else [])
    for device in devices:
        # CUDA kernels are 16-bit: bf16 values (exact in float32, so the tensors are built from those).
        dtype = np.float32 if device == "cpu" else BF16
        if dtype is None:
            pytest.skip("ml_dtypes is not installed")
        c = Cache(rng, [33, 2], seqlen_q=4, heads=8, kv_heads=2, dim=128, page_size=page_size, seqlen_new=4,
                  dtype=dtype)
        tdtype = torch.float32 if device == "cpu" else torch.bfloat16

        def t(x, data=True):
            if x is None:
                return None
            y = torch.from_numpy(np.ascontiguousarray(x).astype(np.float32) if data else x).to(device)
            return y.to(tdtype) if data else y

        q, kc, vc, kn, vn = t(c.q), t(c.k_cache), t(c.v_cache), t(c.k_new), t(c.v_new)
        out, lse = fastattn.attention_with_kv_cache(q, kc, vc, t(c.lens, False), t(c.block_table, False), kn, vn,
                                                    causal=True, return_lse=True)
        assert isinstance(out, torch.Tensor) and out.device.type == device and out.dtype == q.dtype
        ref_out, ref_lse = c.expected(causal=True)
        assert_close(out.float().cpu().numpy(), ref_out, dtype, f"out on {device}")
        assert_close(lse.cpu().numpy(), ref_lse, np.float32, f"lse on {device}", factor=2.0)
        # The append landed in the caller's cache tensors.
        k_after = kc.float().cpu().numpy()
        for b in range(c.batch):
            for i in range(c.seqlen_new):
                got = c.cache_token(k_after, b, int(c.lens[b]) + i)
                assert np.array_equal(got, c.k_new[b, i].astype(np.float32))


def test_torch_cuda_graph_replay_with_changing_seqlens(rng):
    torch = _torch()
    if not torch.cuda.is_available() or not fastattn.build_info()["cuda_compiled"]:
        pytest.skip("needs a CUDA build and a GPU")
    c = Cache(rng, [4000, 4000, 4000], seqlen_q=1, heads=32, kv_heads=8, dim=128, page_size=16, dtype=np.float32,
              spare=64)
    dev = "cuda"
    q = torch.from_numpy(c.q).to(dev, torch.bfloat16)
    kc = torch.from_numpy(np.nan_to_num(c.k_cache)).to(dev, torch.bfloat16)
    vc = torch.from_numpy(np.nan_to_num(c.v_cache)).to(dev, torch.bfloat16)
    table = torch.from_numpy(c.block_table).to(dev)
    seqlens = torch.from_numpy(c.lens).to(dev)
    plan = fastattn.KVCachePlan(q, kc, vc, seqlens, table, causal=True, return_lse=True)
    out = torch.empty_like(q)
    lse = torch.empty((3, 32, 1), device=dev, dtype=torch.float32)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        plan.run(q, kc, vc, seqlens, table, out=out, lse=lse)  # warm-up outside the graph
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        plan.run(q, kc, vc, seqlens, table, out=out, lse=lse)
    for lens in ([4000, 100, 1], [17, 3000, 0], [0, 0, 0], [3999, 1, 99]):
        seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        replayed = (out.clone(), lse.clone())
        with torch.cuda.stream(stream):
            plan.run(q, kc, vc, seqlens, table, out=out, lse=lse)
        stream.synchronize()
        assert torch.equal(replayed[0].view(torch.int16), out.view(torch.int16)), lens
        assert torch.equal(replayed[1], lse), lens
