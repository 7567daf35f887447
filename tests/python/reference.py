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
