"""fastattn.merge_states: split the keys in two, attend to each part with lse, merge, and compare
with attention over all keys and with the float64 NumPy reference (NumPy on the CPU; torch on
CUDA when available)."""

from __future__ import annotations

import numpy as np
import pytest

import fastattn
import reference
from conftest import BF16, CPU_BACKENDS, as_dtype, assert_close, rounded

DTYPES = [np.float32, np.float16] + ([BF16] if BF16 is not None else [])


def part_options(causal, seqlen_k, start, stop):
    """The mask of keys [start, stop) that matches the full bottom-right causal call: the last
    part is plainly causal, an earlier one sees keys up to the full call's diagonal."""
    if not causal:
        return {}
    return {"causal": True} if stop == seqlen_k else {"window": (-1, seqlen_k - stop)}


def random_qkv(rng, b, sq, sk, h, hkv, d):
    return (rng.standard_normal((b, sq, h, d)), rng.standard_normal((b, sk, hkv, d)),
            rng.standard_normal((b, sk, hkv, d)))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,split,causal", [
    ((2, 7, 40, 4, 2, 64), 17, False),
    ((1, 1, 33, 8, 1, 128), 5, True),
    ((2, 63, 63, 2, 1, 64), 20, True),   # part B has rows without keys (lse_b = -inf)
    ((1, 63, 40, 3, 1, 8), 13, True),    # sq > sk: rows without any key (both -inf)
    ((1, 7, 9, 2, 2, 72), 0, True),      # part A has no keys at all
])
def test_split_merge_matches_unsplit(backend, dtype, shape, split, causal):
    rng = np.random.default_rng(sum(shape) + split)
    b, sq, sk, h, hkv, d = shape
    q, k, v = (as_dtype(x, dtype) for x in random_qkv(rng, *shape))
    parts = []
    for start, stop in ((0, split), (split, sk)):
        parts.append(fastattn.attention(q, k[:, start:stop], v[:, start:stop], return_lse=True,
                                        backend=backend, **part_options(causal, sk, start, stop)))
    (out_a, lse_a), (out_b, lse_b) = parts
    out, lse = fastattn.merge_states(out_a, lse_a, out_b, lse_b, backend=backend)
    assert out.dtype == q.dtype and out.shape == q.shape and lse.dtype == np.float32
    whole, whole_lse = fastattn.attention(q, k, v, return_lse=True, causal=causal, backend=backend)
    ref_out, ref_lse = reference.forward(rounded(q, dtype), rounded(k, dtype), rounded(v, dtype),
                                         causal=causal)
    # Two roundings of the parts and one of the merge: twice the single-call tolerance.
    assert_close(out, ref_out, dtype, "merged out vs float64", factor=2.0)
    assert_close(out, whole.astype(np.float64), dtype, "merged out vs unsplit", factor=3.0)
    assert_close(lse, ref_lse, np.float32, "merged lse vs float64")
    assert np.array_equal(np.isneginf(lse), np.isneginf(whole_lse))
    assert not np.isnan(np.asarray(out, dtype=np.float64)).any()


def test_special_rows_and_in_place():
    inf, nan = np.inf, np.nan
    out_a = np.arange(5 * 8, dtype=np.float32).reshape(1, 1, 5, 8) / 10
    out_b = -np.ones((1, 1, 5, 8), np.float32)
    out_a[0, 0, 0] = nan  # side A has no keys in row 0: its values are never read
    lse_a = np.array([[[-inf], [1.0], [-inf], [nan], [2.0]]], np.float32).reshape(1, 5, 1)
    lse_b = np.array([[[0.5], [-inf], [-inf], [0.0], [2.0]]], np.float32).reshape(1, 5, 1)
    expected_a = out_a.copy()
    out, lse = fastattn.merge_states(out_a, lse_a, out_b, lse_b, out=out_a, lse=lse_a)
    assert out is out_a and lse is lse_a
    np.testing.assert_array_equal(out[0, 0, 0], out_b[0, 0, 0])
    np.testing.assert_array_equal(out[0, 0, 1], expected_a[0, 0, 1])
    np.testing.assert_array_equal(out[0, 0, 2], 0.0)
    assert np.isnan(out[0, 0, 3]).all() and np.isnan(lse[0, 3, 0])
    np.testing.assert_allclose(out[0, 0, 4], (expected_a[0, 0, 4] + out_b[0, 0, 4]) / 2, rtol=1e-6)
    np.testing.assert_allclose(lse[0, :, 0][[0, 1, 4]], [0.5, 1.0, 2.0 + np.log(2.0)], rtol=1e-6)
    assert lse[0, 2, 0] == -inf


def test_argument_errors_name_the_argument():
    out_a = np.zeros((1, 2, 3, 8), np.float32)
    lse = np.zeros((1, 3, 2), np.float32)
    with pytest.raises(ValueError, match=r"^out_b: expected dtype f32 \(as out_a\), got dtype f16$"):
        fastattn.merge_states(out_a, lse, out_a.astype(np.float16), lse)
    with pytest.raises(ValueError, match=r"^lse_b: expected shape \[1, 3, 2\]"):
        fastattn.merge_states(out_a, lse, out_a, np.zeros((1, 2, 3), np.float32))




def _torch_cuda():
    try:
        import torch as torch_module
    except ImportError:
        return None
    return torch_module if torch_module.cuda.is_available() else None


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_torch_cuda_split_merge(dtype_name):
    torch_module = _torch_cuda()
    if torch_module is None or not fastattn.build_info()["cuda_compiled"]:
        pytest.skip("needs torch with a CUDA device and a CUDA build of fastattn")
    import fastattn.torch as fat

    dtype = getattr(torch_module, dtype_name)
    gen = torch_module.Generator(device="cuda").manual_seed(7)
    q = torch_module.randn(2, 33, 8, 64, device="cuda", dtype=dtype, generator=gen)
    k = torch_module.randn(2, 300, 2, 64, device="cuda", dtype=dtype, generator=gen)
    v = torch_module.randn(2, 300, 2, 64, device="cuda", dtype=dtype, generator=gen)
    out_a, lse_a = fat.attention(q, k[:, :100], v[:, :100], window=(-1, 200), return_lse=True)
    out_b, lse_b = fat.attention(q, k[:, 100:], v[:, 100:], causal=True, return_lse=True)
    out, lse = fat.merge_states(out_a, lse_a, out_b, lse_b)
    whole, whole_lse = fat.attention(q, k, v, causal=True, return_lse=True)
    tol = 2e-2 if dtype_name == "bfloat16" else 4e-3
    torch_module.testing.assert_close(out, whole, atol=tol, rtol=tol)
    torch_module.testing.assert_close(lse, whole_lse, atol=1e-4, rtol=1e-4)
    # The generic entry point on torch tensors, in place.
    fastattn.merge_states(out_a, lse_a, out_b, lse_b, out=out_a, lse=lse_a)
    torch_module.testing.assert_close(out_a, out, atol=0, rtol=0)
