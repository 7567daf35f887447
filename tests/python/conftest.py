"""Shared helpers of the Python tests: random problems, tolerances, optional frameworks."""

from __future__ import annotations

import os
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # for `import reference`

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None

# Backends the CPU tests run on: the CPU kernels, and the float64 reference through the same API.
CPU_BACKENDS = ["cpu", "reference"]

# |actual - expected| <= ATOL + RTOL * |expected|, elementwise, per storage dtype. Values are
# O(1) (inputs ~ N(0, 1), softmax-averaged outputs); fp32 accumulation over head_dim <= 256.
TOLERANCES = {
    "float32": (2e-4, 2e-4),
    "float16": (2e-3, 2e-3),
    "bfloat16": (2e-2, 2e-2),
}
# Gradients sum over seqlen and heads; allow a few times more.
GRAD_FACTOR = 5.0


def dtype_name(dtype) -> str:
    return "bfloat16" if BF16 is not None and np.dtype(dtype) == BF16 else np.dtype(dtype).name


def assert_close(actual, expected, dtype, what: str, factor: float = 1.0) -> None:
    atol, rtol = TOLERANCES[dtype_name(dtype)]
    a = np.asarray(actual).astype(np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    both_inf = np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))
    with np.errstate(invalid="ignore"):  # inf - inf where both are -inf
        err = np.where(both_inf, 0.0, np.abs(a - e))
    bound = factor * (atol + rtol * np.abs(np.where(both_inf, 0.0, e)))
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err - bound, -np.inf)), a.shape)
        raise AssertionError(
            f"{what}: {bad.sum()} of {a.size} elements off; worst at {i}: actual {a[i]}, "
            f"expected {e[i]}, bound {bound[i]:.3g}"
        )


@dataclass
class Case:
    """One random attention problem: arrays (float64 values) and keyword options."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    dout: np.ndarray
    options: Dict[str, Any] = field(default_factory=dict)

    def ref_options(self) -> Dict[str, Any]:
        keys = ("causal", "window", "scale", "softcap", "alignment", "cu_seqlens_q", "cu_seqlens_k")
        return {k: v for k, v in self.options.items() if k in keys}


def random_case(rng: np.random.Generator, *, varlen: Optional[bool] = None,
                max_seqlen: int = 48) -> Case:
    """Random shapes (including empty and ragged sequences), GQA, masks, softcap, scale."""
    heads = int(rng.choice([1, 2, 4, 6]))
    kv_heads = int(rng.choice([d for d in (1, 2, 3, 6) if heads % d == 0]))
    head_dim = int(rng.choice([8, 16, 32, 64, 72, 128]))
    options: Dict[str, Any] = {}
    r = rng.random()
    if r < 0.3:
        options["causal"] = True
    elif r < 0.5:
        options["window"] = (int(rng.integers(-1, 12)), int(rng.integers(-1, 12)))
    elif r < 0.6:
        options["causal"] = True
        options["window"] = (int(rng.integers(0, 12)), 0)
    if rng.random() < 0.5:
        options["alignment"] = "top_left"
    if rng.random() < 0.25:
        options["softcap"] = float(rng.uniform(1.0, 20.0))
    if rng.random() < 0.25:
        options["scale"] = float(rng.uniform(0.05, 0.5))

    varlen = bool(rng.random() < 0.3) if varlen is None else varlen
    if varlen:
        batch = int(rng.integers(1, 4))
        lens_q = rng.integers(0, max_seqlen, batch)
        lens_k = rng.integers(0, max_seqlen, batch)
        cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
        cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
        options["cu_seqlens_q"], options["cu_seqlens_k"] = cu_q, cu_k
        q_shape = (int(cu_q[-1]), heads, head_dim)
        k_shape = (int(cu_k[-1]), kv_heads, head_dim)
    else:
        batch = int(rng.integers(1, 3))
        q_shape = (batch, int(rng.integers(1, max_seqlen)), heads, head_dim)
        k_shape = (batch, int(rng.integers(1, max_seqlen)), kv_heads, head_dim)
    return Case(
        q=rng.standard_normal(q_shape),
        k=rng.standard_normal(k_shape),
        v=rng.standard_normal(k_shape),
        dout=rng.standard_normal(q_shape),
        options=options,
    )


def as_dtype(x: np.ndarray, dtype) -> np.ndarray:
    return np.ascontiguousarray(x).astype(dtype)


def rounded(x: np.ndarray, dtype) -> np.ndarray:
    """x rounded to dtype and back to float64: the values the kernel actually sees."""
    return np.asarray(x).astype(dtype).astype(np.float64)


@pytest.fixture
def rng(request) -> np.random.Generator:
    # Reproducible per test (str hash() is salted per process).
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
