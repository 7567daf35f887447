"""Memory-capped mode from Python: fastattn.set_device_memory_limit / device_memory_limit and
KernelChoice.device_memory_bytes. The limit caps CUDA calls only; the CUDA test skips without a
CUDA build and device."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fastattn

GiB = 1 << 30


@pytest.fixture(autouse=True)
def back_to_environment(monkeypatch):
    monkeypatch.delenv("FASTATTN_DEVICE_MEMORY_LIMIT", raising=False)
    fastattn.reload_environment()  # fastattn reads the variables once per process
    yield
    fastattn.set_device_memory_limit(None)
    monkeypatch.undo()
    fastattn.reload_environment()


def set_limit_variable(monkeypatch, value: str) -> None:
    monkeypatch.setenv("FASTATTN_DEVICE_MEMORY_LIMIT", value)
    fastattn.reload_environment()


def test_limit_sources(monkeypatch):
    assert fastattn.device_memory_limit() == (0, "")
    set_limit_variable(monkeypatch, "16G")
    assert fastattn.device_memory_limit() == (16 * GiB, "FASTATTN_DEVICE_MEMORY_LIMIT=16G")
    fastattn.set_device_memory_limit("32GiB")
    assert fastattn.device_memory_limit() == (32 * GiB, "set_device_memory_limit()")
    fastattn.set_device_memory_limit(1_500_000_000)
    assert fastattn.device_memory_limit()[0] == 1_500_000_000
    fastattn.set_device_memory_limit(0)
    assert fastattn.device_memory_limit() == (0, "")
    fastattn.set_device_memory_limit(None)
    assert fastattn.device_memory_limit()[0] == 16 * GiB


def test_bad_limits_name_the_argument(monkeypatch):
    with pytest.raises(ValueError, match=re.escape("limit: expected bytes or a size with a unit")):
        fastattn.set_device_memory_limit("16 gigs")
    for bad in (-1, 1.5, True, [16]):
        with pytest.raises(ValueError, match=re.escape("limit: expected None, bytes >= 0 or a size string")):
            fastattn.set_device_memory_limit(bad)
    set_limit_variable(monkeypatch, "lots")
    with pytest.raises(ValueError, match=re.escape("FASTATTN_DEVICE_MEMORY_LIMIT: expected bytes or a size")):
        fastattn.device_memory_limit()


def test_cpu_calls_ignore_the_limit(monkeypatch):
    set_limit_variable(monkeypatch, "lots")  # not even parsed for CPU calls
    fastattn.set_device_memory_limit(1)
    q = np.random.default_rng(0).standard_normal((1, 8, 2, 16)).astype(np.float32)
    out = fastattn.attention(q, q, q, causal=True)
    assert out.shape == q.shape and np.isfinite(out).all()
    assert fastattn.plan(q, q, q).device_memory_bytes == 0
    assert fastattn.plan(q, q, q, backward=True).device_memory_bytes == 0


def test_cuda_call_over_the_limit_raises_memory_error():
    torch = pytest.importorskip("torch")
    if not fastattn.build_info()["cuda_compiled"] or not torch.cuda.is_available():
        pytest.skip("needs a CUDA build of fastattn and a CUDA device")
    q = torch.randn(2, 256, 4, 64, device="cuda", dtype=torch.bfloat16)
    choice = fastattn.plan(q, q, q, causal=True)  # counts an lse, as attention's return_lse
    need = choice.device_memory_bytes
    assert need >= 4 * q.numel() * q.element_size()  # q, k, v, out
    fastattn.set_device_memory_limit(need - 1)
    with pytest.raises(MemoryError, match=re.escape("cuda forward: needs ")) as info:
        fastattn.attention(q, q, q, causal=True, return_lse=True)
    assert f"limit ({need - 1} bytes) set by set_device_memory_limit()" in str(info.value)
    with pytest.raises(MemoryError):
        fastattn.plan(q, q, q, causal=True)
    fastattn.set_device_memory_limit(need)
    out = fastattn.attention(q, q, q, causal=True)
    assert out.shape == q.shape
