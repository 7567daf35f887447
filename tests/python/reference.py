"""Float64 NumPy attention: the oracle of the Python tests.

Written from the semantics in docs (not from the C++ reference), one (sequence, head) at a time
with the full score matrix, so it is obviously right and only good for small problems.
Layouts are fastattn's: padded [batch, seqlen, heads, head_dim] or varlen [total, heads, head_dim]
with cu_seqlens.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np


def visible(seqlen_q: int, seqlen_k: int, causal: bool, window: Optional[Tuple[int, int]],
            alignment: str) -> np.ndarray:
    """bool [seqlen_q, seqlen_k]: key j is visible to query i."""
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0
    offset = seqlen_k - seqlen_q if alignment == "bottom_right" else 0
    d = np.arange(seqlen_q)[:, None] + offset
    j = np.arange(seqlen_k)[None, :]
    mask = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if left >= 0:
        mask &= j >= d - left
    if right >= 0:
        mask &= j <= d + right
    return mask


def _sequences(q, k, cu_seqlens_q, cu_seqlens_k) -> List[Tuple[slice, slice, int]]:
    """(query token slice, key token slice, batch index) per sequence, on flattened tokens."""
    if cu_seqlens_q is None:
        b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
        return [(slice(i * sq, (i + 1) * sq), slice(i * sk, (i + 1) * sk), i) for i in range(b)]
    cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    return [(slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1]), i) for i in range(len(cq) - 1)]


def _flat(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x.reshape(-1, x.shape[-2], x.shape[-1])  # [tokens, heads, head_dim]


class _Scores:
    """Scores, softcap tanh and probabilities of one (sequence, head)."""

    def __init__(self, qh, kh, mask, scale, softcap):
        raw = scale * (qh @ kh.T)
        self.tanh = np.tanh(raw / softcap) if softcap > 0 else None
        s = softcap * self.tanh if softcap > 0 else raw
        s = np.where(mask, s, -np.inf)
        any_visible = mask.any(axis=1)
        m = np.where(any_visible, s.max(axis=1, initial=-np.inf), 0.0)
        total = np.exp(s - m[:, None]).sum(axis=1)
        with np.errstate(divide="ignore"):
            self.lse = np.where(any_visible, m + np.log(np.where(any_visible, total, 1.0)), -np.inf)
        finite_lse = np.where(any_visible, self.lse, 0.0)
        self.p = np.where(mask, np.exp(s - finite_lse[:, None]), 0.0)


def forward(q, k, v, *, causal=False, window=None, scale=None, softcap=0.0,
            alignment="bottom_right", cu_seqlens_q=None, cu_seqlens_k=None):
    """(out, lse) in float64; out like q, lse [batch, heads, seqlen_q] (varlen [heads, total_q])."""
    qf, kf, vf = _flat(q), _flat(k), _flat(v)
    heads, kv_heads, dim = qf.shape[1], kf.shape[1], qf.shape[2]
    scale = 1.0 / np.sqrt(dim) if scale is None else scale
    out = np.zeros_like(qf)
    lse = np.full((heads, qf.shape[0]), -np.inf)
    for sq, sk, _ in _sequences(q, k, cu_seqlens_q, cu_seqlens_k):
        nq, nk = sq.stop - sq.start, sk.stop - sk.start
        mask = visible(nq, nk, causal, window, alignment)
        for h in range(heads):
            kvh = h // (heads // kv_heads)
            sc = _Scores(qf[sq, h], kf[sk, kvh], mask, scale, softcap)
            out[sq, h] = sc.p @ vf[sk, kvh]
            lse[h, sq] = sc.lse
    if cu_seqlens_q is None:
        b, s = q.shape[0], q.shape[1]
        return out.reshape(q.shape), lse.reshape(heads, b, s).transpose(1, 0, 2)
    return out.reshape(q.shape), lse


def backward(dout, q, k, v, *, causal=False, window=None, scale=None, softcap=0.0,
             alignment="bottom_right", cu_seqlens_q=None, cu_seqlens_k=None):
    """(dq, dk, dv) in float64, from the definition (recomputes the forward)."""
    qf, kf, vf, dof = _flat(q), _flat(k), _flat(v), _flat(dout)
    heads, kv_heads, dim = qf.shape[1], kf.shape[1], qf.shape[2]
    scale = 1.0 / np.sqrt(dim) if scale is None else scale
    dq, dk, dv = np.zeros_like(qf), np.zeros_like(kf), np.zeros_like(vf)
    for sq, sk, _ in _sequences(q, k, cu_seqlens_q, cu_seqlens_k):
        nq, nk = sq.stop - sq.start, sk.stop - sk.start
        mask = visible(nq, nk, causal, window, alignment)
        for h in range(heads):
            kvh = h // (heads // kv_heads)
            qh, kh, vh, doh = qf[sq, h], kf[sk, kvh], vf[sk, kvh], dof[sq, h]
            sc = _Scores(qh, kh, mask, scale, softcap)
            out_h = sc.p @ vh
            dp = doh @ vh.T
            ds = sc.p * (dp - (doh * out_h).sum(axis=1, keepdims=True))
            if softcap > 0:
                ds = ds * (1.0 - sc.tanh ** 2)
            dq[sq, h] = scale * ds @ kh
            dk[sk, kvh] += scale * ds.T @ qh
            dv[sk, kvh] += sc.p.T @ doh
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


# Distance from 1 to the next representable value, per dtype name (tools/harness/judge.cpp).
EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def naive_rule_violations(got, ref, naive, terms, dtype_name: str, head_dim: int) -> List[str]:
    """The harness's tolerance rule (tools/harness/judge.hpp, harness.hpp), in NumPy.

    got: a backend's result; ref: float64; naive: a naive same-precision implementation's
    result; terms: per element the sum of the absolute values of its terms (>= |ref|). The last
    axis is head_dim, one row per leading index. With u = eps(dtype), c = 4 sqrt(head_dim)
    eps(float32):
      per row:  max|got - ref| <= 2 max|naive - ref| + u max|ref| + u16/2 max(terms)
                                   + c max(|ref|, terms) (this last maximum tensor-wide)
      tensor:   ||got - ref||_F <= 2 ||naive - ref||_F + u ||ref||_F + c max(||ref||_F, ||terms||_F)
    u16 = u for float16 and bfloat16 (kernels may round P and dS to the dtype before the second
    product: half an ulp of each term), 0 for float32. Returns what is violated (empty when the
    rule holds). NaN never passes.
    """
    got, ref, naive, terms = (np.asarray(x, dtype=np.float64) for x in (got, ref, naive, terms))
    if ref.size == 0:
        return []
    u, c = EPS[dtype_name], 4.0 * np.sqrt(head_dim) * EPS["float32"]
    u16 = u if dtype_name in ("float16", "bfloat16") else 0.0
    with np.errstate(invalid="ignore"):
        err = np.where(np.isnan(got), np.inf, np.abs(got - ref))
        naive_err = np.abs(naive - ref)

    def row_max(x):
        return x.reshape(-1, x.shape[-1]).max(axis=1)

    f32_floor = c * max(np.abs(ref).max(), terms.max())
    row_bound = (2.0 * row_max(naive_err) + u * row_max(np.abs(ref)) + 0.5 * u16 * row_max(terms)
                 + f32_floor)
    row_err = row_max(err)
    problems = []
    bad = ~(row_err <= row_bound)
    if bad.any():
        i = int(np.argmax(np.where(bad, row_err / np.maximum(row_bound, 1e-300), -np.inf)))
        problems.append(f"{bad.sum()} of {bad.size} rows over the max-abs bound; worst row {i}: "
                        f"error {row_err[i]:.3g} > bound {row_bound[i]:.3g} "
                        f"(naive error {row_max(naive_err)[i]:.3g})")
    norm = np.linalg.norm
    fro_bound = (2.0 * norm(naive_err) + u * norm(ref) + c * max(norm(ref), norm(terms)))
    if not norm(err) <= fro_bound:
        problems.append(f"Frobenius error {norm(err):.3g} > bound {fro_bound:.3g} "
                        f"(naive {norm(naive_err):.3g}, |ref| {norm(ref):.3g})")
    return problems
