"""JAX and CuPy arrays (where installed): outputs in the input's framework, clean errors on
devices this build has no kernels for."""

from __future__ import annotations

import numpy as np
import pytest

import fastattn
import reference
from conftest import assert_close

CUDA_BUILT = fastattn.build_info()["cuda_compiled"]


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 6, 2, 16)).astype(np.float32) for _ in range(3)]


class TestJax:
    @pytest.fixture(autouse=True)
    def jax(self):
        self.jax = pytest.importorskip("jax")
        self.cpu = self.jax.devices("cpu")[0]

    def test_cpu_arrays_give_jax_arrays(self):
        q, k, v = inputs()
        jq, jk, jv = (self.jax.device_put(x, self.cpu) for x in (q, k, v))
        out, lse = fastattn.attention(jq, jk, jv, causal=True, return_lse=True)
        assert isinstance(out, self.jax.Array) and isinstance(lse, self.jax.Array)
        ref_out, ref_lse = reference.forward(q, k, v, causal=True)
        assert_close(np.asarray(out), ref_out, np.float32, "out")
        assert_close(np.asarray(lse), ref_lse, np.float32, "lse")
        dq, dk, dv = fastattn.attention_backward(jq, jq, jk, jv, out, lse, causal=True)
        assert isinstance(dq, self.jax.Array)
        assert_close(np.asarray(dv), reference.backward(q, q, k, v, causal=True)[2], np.float32,
                     "dv", factor=5.0)

    def test_jax_arrays_are_not_outputs(self):
        q = self.jax.device_put(inputs()[0], self.cpu)
        with pytest.raises(ValueError, match="out: expected a writable array, got a JAX array"):
            fastattn.attention(q, q, q, out=self.jax.numpy.zeros_like(q))

    def test_accelerator_arrays_are_unsupported(self):
        gpus = [d for d in self.jax.devices() if d.platform != "cpu"]
        if not gpus:
            pytest.skip("no JAX accelerator")
        q = self.jax.device_put(inputs()[0], gpus[0])
        with pytest.raises(fastattn.UnsupportedError, match="q: expected a JAX array on the CPU"):
            fastattn.attention(q, q, q)


class TestCuPy:
    @pytest.fixture(autouse=True)
    def cupy(self):
        self.cupy = pytest.importorskip("cupy")
        try:
            self.cupy.cuda.runtime.getDeviceCount()
        except Exception:  # cupy without a usable GPU
            pytest.skip("no CUDA device for CuPy")

    @pytest.mark.skipif(CUDA_BUILT, reason="fastattn has CUDA kernels")
    def test_cupy_arrays_raise_unsupported(self):
        q = self.cupy.asarray(inputs()[0])
        with pytest.raises(fastattn.UnsupportedError,
                           match=r"q: expected a cpu tensor \(fastattn was built without CUDA\), got device cuda:0"):
            fastattn.attention(q, q, q)
