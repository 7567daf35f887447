"""fastattn on NumPy arrays, CPU: forward, lse and backward against a float64 NumPy reference."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import fastattn
import reference
from conftest import BF16, CPU_BACKENDS, GRAD_FACTOR, as_dtype, assert_close, random_case, rounded


def run_case(case, dtype, backend, deterministic=False):
    q, k, v, dout = (as_dtype(x, dtype) for x in (case.q, case.k, case.v, case.dout))
    out, lse = fastattn.attention(q, k, v, return_lse=True, backend=backend, **case.options)
    dq, dk, dv = fastattn.attention_backward(dout, q, k, v, out, lse, backend=backend,
                                             deterministic=deterministic, **case.options)
    return (q, k, v, dout), (out, lse), (dq, dk, dv)


def check_case(case, dtype, backend):
    (q, k, v, dout), (out, lse), grads = run_case(case, dtype, backend)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == np.float32
    # The reference sees the inputs as rounded to dtype, so only the kernel's error is measured.
    qr, kr, vr, dr = (rounded(x, dtype) for x in (case.q, case.k, case.v, case.dout))
    ref_out, ref_lse = reference.forward(qr, kr, vr, **case.ref_options())
    assert_close(out, ref_out, dtype, "out")
    assert_close(lse, ref_lse, np.float32 if dtype != np.float32 else dtype, "lse")
    # Backward from the kernel's own out/lse is compared with the exact gradients.
    ref_grads = reference.backward(dr, qr, kr, vr, **case.ref_options())
    for name, got, want in zip(("dq", "dk", "dv"), grads, ref_grads):
        assert got.dtype == q.dtype and got.shape == want.shape
        assert_close(got, want, dtype, name, factor=GRAD_FACTOR)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("seed", range(16))
def test_random_problems_float32(backend, seed):
    case = random_case(np.random.default_rng(1000 + seed))
    check_case(case, np.float32, backend)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_random_problems_float16(backend, seed):
    case = random_case(np.random.default_rng(2000 + seed), max_seqlen=32)
    check_case(case, np.float16, backend)


@pytest.mark.skipif(BF16 is None, reason="needs ml_dtypes for NumPy bfloat16")
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_random_problems_bfloat16(backend, seed):
    case = random_case(np.random.default_rng(3000 + seed), max_seqlen=32)
    check_case(case, BF16, backend)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_varlen_with_empty_sequences(backend, rng):
    cu_q = np.array([0, 5, 5, 12, 13], dtype=np.int32)  # a sequence with no queries
    cu_k = np.array([0, 0, 7, 16, 30], dtype=np.int32)  # a sequence with no keys
    q = rng.standard_normal((13, 4, 32)).astype(np.float32)
    k = rng.standard_normal((30, 2, 32)).astype(np.float32)
    v = rng.standard_normal((30, 2, 32)).astype(np.float32)
    opts = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    out, lse = fastattn.attention(q, k, v, return_lse=True, backend=backend, **opts)
    ref_out, ref_lse = reference.forward(q, k, v, **opts)
    assert lse.shape == (4, 13)
    assert_close(out, ref_out, np.float32, "out")
    assert_close(lse, ref_lse, np.float32, "lse")
    assert np.all(out[0:5] == 0) and np.all(np.isneginf(lse[:, 0:5]))  # sequence 0 sees no key


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_rows_that_see_no_key_are_zero_with_lse_minus_inf(backend, rng):
    q = rng.standard_normal((1, 8, 2, 16)).astype(np.float32)
    k = rng.standard_normal((1, 4, 2, 16)).astype(np.float32)
    # top_left causal: queries 0..7 see keys <= i, all see key 0 -> nothing empty; a window
    # (left=0, right=0) with bottom_right alignment: query i sees key i - 4, so i < 4 see none.
    out, lse = fastattn.attention(q, k, k, window=(0, 0), return_lse=True, backend=backend)
    assert np.all(out[:, :4] == 0) and np.all(np.isneginf(lse[:, :, :4]))
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse[:, :, 4:]))
    dout = np.ones_like(out)
    dq, dk, dv = fastattn.attention_backward(dout, q, k, k, out, lse, window=(0, 0), backend=backend)
    assert np.all(dq[:, :4] == 0) and all(np.all(np.isfinite(g)) for g in (dq, dk, dv))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_empty_sequences_are_valid_calls(backend):
    q = np.zeros((2, 0, 4, 16), np.float32)
    k = np.zeros((2, 5, 4, 16), np.float32)
    out, lse = fastattn.attention(q, k, k, return_lse=True, backend=backend)
    assert out.shape == (2, 0, 4, 16) and lse.shape == (2, 4, 0)
    dq, dk, dv = fastattn.attention_backward(out, q, k, k, out, lse, backend=backend)
    assert dq.shape == q.shape and np.all(dk == 0) and np.all(dv == 0)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_strided_views_are_read_in_place(backend, rng):
    # q, k, v as views into one packed [batch, seqlen, 3, heads, head_dim] array (flash-attn's
    # qkvpacked layout): no copy, non-contiguous strides.
    qkv = rng.standard_normal((2, 10, 3, 4, 32)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.flags.c_contiguous
    out = fastattn.attention(q, k, v, causal=True, backend=backend)
    ref_out, _ = reference.forward(q, k, v, causal=True)
    assert_close(out, ref_out, np.float32, "out")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_outputs_written_in_place(backend, rng):
    q = rng.standard_normal((1, 6, 2, 16)).astype(np.float32)
    out_buffer = np.full((1, 6, 2, 16), np.nan, np.float32)
    out, lse = fastattn.attention(q, q, q, out=out_buffer, return_lse=True, backend=backend)
    assert out is out_buffer
    assert_close(out_buffer, reference.forward(q, q, q)[0], np.float32, "out")
    # A strided out: every other row of a larger buffer.
    big = np.zeros((1, 12, 2, 16), np.float32)
    fastattn.attention(q, q, q, out=big[:, ::2], backend=backend)
    assert_close(big[:, ::2], out, np.float32, "strided out")
    assert np.all(big[:, 1::2] == 0)
    grads = [np.full_like(q, np.nan) for _ in range(3)]
    result = fastattn.attention_backward(np.ones_like(q), q, q, q, out, lse, dq=grads[0],
                                         dk=grads[1], dv=grads[2], backend=backend)
    assert all(r is g for r, g in zip(result, grads))
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_deterministic_backward_is_bitwise_repeatable(rng):
    case = random_case(rng, varlen=False)
    first = run_case(case, np.float32, "cpu", deterministic=True)[2]
    second = run_case(case, np.float32, "cpu", deterministic=True)[2]
    for a, b in zip(first, second):
        assert np.array_equal(a, b)


def test_num_threads_does_not_change_the_result(rng):
    q = rng.standard_normal((2, 40, 4, 64)).astype(np.float32)
    one = fastattn.attention(q, q, q, causal=True, num_threads=1)
    two = fastattn.attention(q, q, q, causal=True, num_threads=2)
    assert_close(one, two, np.float32, "num_threads=1 vs 2")


def test_cpu_backend_agrees_with_reference_backend(rng):
    case = random_case(rng, varlen=False)
    q, k, v = (x.astype(np.float32) for x in (case.q, case.k, case.v))
    a = fastattn.attention(q, k, v, backend="cpu", **case.options)
    b = fastattn.attention(q, k, v, backend="reference", **case.options)
    assert_close(a, b, np.float32, "cpu vs reference")


class DLPackOnly:
    """A foreign array type that only speaks DLPack (no buffer protocol, unknown module)."""

    def __init__(self, array):
        self._array = array
        self.shape = array.shape

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_any_dlpack_producer_is_accepted(rng):
    q = rng.standard_normal((1, 5, 2, 16)).astype(np.float32)
    out = fastattn.attention(DLPackOnly(q), DLPackOnly(q), DLPackOnly(q), backend="reference")
    assert isinstance(out, np.ndarray)  # unknown CPU producers get NumPy outputs
    assert_close(out, reference.forward(q, q, q)[0], np.float32, "out")


def test_plan_describes_the_kernel_without_running(rng):
    # 64 query rows: a prefill call (16 or fewer would take the decode kernel, cpu.decode.*)
    q = rng.standard_normal((2, 64, 4, 64)).astype(np.float32)
    choice = fastattn.plan(q, q, q, causal=True)
    assert isinstance(choice, fastattn.KernelChoice)
    assert choice.backend == "cpu"
    assert choice.kernel.startswith("cpu.forward.") and choice.isa
    assert choice.block_q > 0 and choice.block_k > 0 and choice.num_threads > 0
    assert choice.reason and choice.kernel in choice.describe()
    back = fastattn.plan(q, q, q, backward=True, backend="reference")
    assert back.backend == "reference" and back.kernel == "reference.backward.f64"
    assert "reference" in repr(back)


def test_build_info():
    info = fastattn.build_info()
    assert info["version"] == fastattn.__version__
    assert isinstance(info["cuda_compiled"], bool)
    assert isinstance(info["cpu_isas_compiled"], list)
    assert isinstance(info["cpu_isa_selected"], str)


def test_gil_is_released_during_the_kernel(rng):
    # A reference call on a mid-sized problem takes a while; another Python thread must run
    # meanwhile (it could not if the call held the GIL).
    # ~0.3 G multiply-adds in float64: 0.1 s on a fast core, more on a loaded one.
    q = rng.standard_normal((1, 1024, 2, 64)).astype(np.float32)
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    time.sleep(0.01)
    start = time.perf_counter()
    fastattn.attention(q, q, q, backend="reference", num_threads=1)
    end = time.perf_counter()
    done.set()
    thread.join()
    during = [t for t in ticks if start < t < end]
    assert end - start > 0.02, "problem too small to tell"
    assert len(during) >= 3, f"{len(during)} ticks during a {end - start:.3f} s call"
