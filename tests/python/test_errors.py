"""Errors: every bad call raises a Python exception whose message names the argument, what was
expected and what was given (the C++ library's message, unchanged). Never a crash."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fastattn


def arrays(shape_q=(1, 4, 2, 16), shape_k=None, dtype=np.float32):
    shape_k = shape_k or shape_q
    return (np.zeros(shape_q, dtype), np.zeros(shape_k, dtype), np.zeros(shape_k, dtype))


def raises(exc, pattern):
    return pytest.raises(exc, match=re.escape(pattern))


def test_head_dim_must_be_a_multiple_of_8():
    with raises(ValueError, "q: expected head_dim (shape[3]) a multiple of 8 in [8, 256], got 12"):
        fastattn.attention(*arrays((1, 4, 2, 12)))


def test_kv_heads_must_divide_heads():
    q, _, _ = arrays((1, 4, 8, 16))
    k = np.zeros((1, 4, 3, 16), np.float32)
    with raises(ValueError, "k: expected num_kv_heads (shape[2]) dividing q's num_heads = 8, got 3"):
        fastattn.attention(q, k, k)


def test_rank_is_checked():
    q = np.zeros((4, 2, 16), np.float32)
    with raises(ValueError, "q: expected rank 4 [batch, seqlen, heads, head_dim], got rank 3"):
        fastattn.attention(q, q, q)
    with raises(ValueError, "q: expected rank <= 4, got rank 5"):
        fastattn.attention(np.zeros((1, 1, 1, 1, 8), np.float32), q, q)


def test_unsupported_dtypes_are_named():
    with raises(ValueError, "q: expected dtype float32, float16 or bfloat16, got dtype float64"):
        fastattn.attention(*arrays(dtype=np.float64))
    q, k, v = arrays()
    with raises(ValueError, "k: expected dtype f32, got dtype f16"):
        fastattn.attention(q, k.astype(np.float16), v)
    with raises(ValueError, "v: expected dtype float32, float16 or bfloat16, got dtype int64"):
        fastattn.attention(q, k, v.astype(np.int64))


def test_cu_seqlens_must_be_int32():
    q = np.zeros((6, 2, 16), np.float32)
    cu = np.array([0, 6], np.int64)
    with raises(ValueError, "cu_seqlens_q: expected dtype int32, got dtype int64"):
        fastattn.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu)
    with raises(ValueError, "options.cu_seqlens_k: expected a tensor, since cu_seqlens_q is given, got none"):
        fastattn.attention(q, q, q, cu_seqlens_q=cu.astype(np.int32))
    bad = np.array([0, 4, 2], np.int32)
    with raises(ValueError, "options.cu_seqlens_q: expected non-decreasing offsets"):
        fastattn.attention(q, q, q, cu_seqlens_q=bad, cu_seqlens_k=bad)


def test_not_an_array():
    q, k, v = arrays()
    with raises(ValueError, "q: expected an array (NumPy, PyTorch, CuPy, JAX or any DLPack producer), got an object of type list"):
        fastattn.attention([[1.0]], k, v)
    with raises(ValueError, "v: expected an array (NumPy, PyTorch, CuPy, JAX or any DLPack producer), got an object of type str"):
        fastattn.attention(q, k, "v")


def test_outputs_must_be_writable_and_not_overlap():
    q, k, v = arrays()
    out = np.zeros_like(q)
    out.flags.writeable = False
    with raises(ValueError, "out: expected a writable array, got a read-only one"):
        fastattn.attention(q, k, v, out=out)
    with raises(ValueError, "out: expected memory that does not overlap q, got an overlapping range"):
        fastattn.attention(q, k, v, out=q)
    with raises(ValueError, "out: expected shape [1, 4, 2, 16] (as q), got shape [1, 4, 2, 8]"):
        fastattn.attention(q, k, v, out=np.zeros((1, 4, 2, 8), np.float32))


def test_head_dim_must_be_contiguous():
    q = np.zeros((1, 4, 2, 32), np.float32)[..., ::2]
    with raises(ValueError, "q: expected a contiguous head_dim (stride[3] = 1), got stride 2"):
        fastattn.attention(q, q, q)


def test_option_values():
    q, k, v = arrays()
    with raises(ValueError, "backend: expected one of 'auto', 'cpu', 'reference', 'cuda', got 'gpu'"):
        fastattn.attention(q, k, v, backend="gpu")
    with raises(ValueError, "alignment: expected one of 'bottom_right', 'top_left', got 'center'"):
        fastattn.attention(q, k, v, alignment="center")
    with raises(ValueError, "window: expected None or a pair (left, right) of ints (-1: unbounded), got 5"):
        fastattn.attention(q, k, v, window=5)
    with raises(ValueError, "options.window_left: expected >= -1 (-1: unbounded), got -3"):
        fastattn.attention(q, k, v, window=(-3, 0))
    with raises(ValueError, "options.window_right: expected -1 or 0 with causal, got 2"):
        fastattn.attention(q, k, v, causal=True, window=(4, 2))
    with raises(ValueError, "options.softcap: expected 0 (off) or a finite positive value, got -1.000000"):
        fastattn.attention(q, k, v, softcap=-1.0)
    with raises(ValueError, "options.num_threads: expected >= 0 (0: default), got -2"):
        fastattn.attention(q, k, v, num_threads=-2)


def test_cuda_backend_on_cpu_arrays():
    with raises(ValueError, "options.backend: expected cpu, reference or automatic for tensors on cpu, got cuda"):
        fastattn.attention(*arrays(), backend="cuda")


def test_backward_checks_its_arguments():
    q, k, v = arrays()
    out, lse = fastattn.attention(q, k, v, return_lse=True)
    with raises(ValueError, "lse: expected shape [1, 2, 4] ([batch, num_heads, seqlen_q]), got shape [1, 4, 2]"):
        fastattn.attention_backward(out, q, k, v, out, lse.reshape(1, 4, 2))
    with raises(ValueError, "lse: expected dtype float32, got dtype float16"):
        fastattn.attention_backward(out, q, k, v, out, lse.astype(np.float16))
    with raises(ValueError, "dk: expected shape [1, 4, 2, 16] (as k), got shape [1, 4, 2, 8]"):
        fastattn.attention_backward(out, q, k, v, out, lse, dk=np.zeros((1, 4, 2, 8), np.float32))


def test_exception_types():
    assert issubclass(fastattn.UnsupportedError, ValueError)
    # Nothing was written on error.
    q, k, v = arrays((1, 4, 2, 16))
    out = np.full_like(q, 7.0)
    with pytest.raises(ValueError):
        fastattn.attention(q, k[:, :, :1].copy(), v, out=out)
    assert np.all(out == 7.0)
