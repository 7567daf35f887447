"""fastattn.torch.attention's eager path (no gradient to record, not traced: the extension called
directly) against the custom op it skips: bitwise the same outputs, the same errors, and each
path taken exactly when it should be."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import fastattn  # noqa: E402
import fastattn.torch as fat  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def tensors(device, dtype, b=2, sq=33, sk=47, h=4, hkv=2, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(s, generator=g).to(device, dtype)  # noqa: E731
    return make(b, sq, h, d), make(b, sk, hkv, d), make(b, sk, hkv, d)


def dtype_for(device):
    return torch.bfloat16 if device == "cuda" else torch.float32


def skip_without_kernel(q, k, v, **options):
    try:
        fastattn.plan(q, k, v, **options)
    except fastattn.UnsupportedError as e:
        pytest.skip(str(e))


def custom_op(q, k, v, **options):
    """The custom op's outputs for the same call, forced (inputs that require grad)."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    out, lse = fat.attention(q, k, v, return_lse=True, **options)
    assert out.grad_fn is not None  # the custom op ran
    return out.detach(), lse.detach()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [{}, {"causal": True}, {"window": (5, 3), "softcap": 20.0},
                                     {"causal": True, "scale": 0.3}], ids=str)
def test_eager_equals_custom_op(device, options):
    q, k, v = tensors(device, dtype_for(device))
    skip_without_kernel(q, k, v, **options)
    out, lse = fat.attention(q, k, v, return_lse=True, **options)
    assert out.grad_fn is None and out.is_contiguous()
    expected_out, expected_lse = custom_op(q, k, v, **options)
    assert torch.equal(out, expected_out)
    assert torch.equal(lse, expected_lse)
    assert torch.equal(fat.attention(q, k, v, **options), expected_out)  # without lse too


@pytest.mark.parametrize("device", DEVICES)
def test_eager_strided_and_varlen(device):
    dtype = dtype_for(device)
    q, k, v = tensors(device, dtype)
    # [batch, heads, seqlen, dim] storage seen as [batch, seqlen, heads, dim]: transformers' case.
    qt, kt, vt = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    skip_without_kernel(qt, kt, vt, causal=True)
    out = fat.attention(qt, kt, vt, causal=True)
    assert out.is_contiguous() and torch.equal(out, fat.attention(q, k, v, causal=True))
    cu_q = torch.tensor([0, 5, 33], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 20, 47], dtype=torch.int32, device=device)
    varlen = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=28, max_seqlen_k=27,
                  causal=True)
    out, lse = fat.attention(q[0], k[0], v[0], return_lse=True, **varlen)
    expected_out, expected_lse = custom_op(q[0], k[0], v[0], **varlen)
    assert torch.equal(out, expected_out) and torch.equal(lse, expected_lse)


def test_paths_taken(monkeypatch):
    q, k, v = tensors("cpu", torch.float32)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    real_op = fat._forward_op
    calls = []
    monkeypatch.setattr(fat, "_forward_op", lambda *a: calls.append(1) or real_op(*a))
    fat.attention(q, k, v)                         # plain tensors: eager
    with torch.no_grad():
        fat.attention(*leaves)                     # no gradient recorded: eager
    with torch.inference_mode():
        fat.attention(q, k, v)
    assert calls == []
    out = fat.attention(*leaves)                   # a gradient to record: the custom op
    assert calls == [1] and out.grad_fn is not None
    out.sum().backward()
    assert all(x.grad is not None for x in leaves)


def test_eager_errors_match_custom_op():
    q, k, v = tensors("cpu", torch.float32)
    bad_k = k[..., :32]
    with pytest.raises(ValueError) as eager:
        fat.attention(q, bad_k, v)
    with pytest.raises(ValueError) as op:
        custom_op(q, bad_k, v)
    assert str(eager.value) == str(op.value)
    with pytest.raises(ValueError, match="window"):
        fat.attention(q, k, v, window=(1, 2, 3))


def test_transforms_and_modes_take_the_custom_op(monkeypatch):
    """Under a functorch transform (vmap) or a torch dispatch / function mode, the eager path
    would bypass what the transform or mode does to the call: the custom op runs instead."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    q, k, v = tensors("cpu", torch.float32, b=2, sq=5, sk=9)
    real_op = fat._forward_op
    calls = []
    monkeypatch.setattr(fat, "_forward_op", lambda *a: calls.append(1) or real_op(*a))
    assert fat._plain_context()  # nothing active: the eager path is allowed

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Counting():
        assert not fat._plain_context()
        fat.attention(q, k, v)
    assert calls == [1]

    class Passing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Passing():
        assert not fat._plain_context()
        fat.attention(q, k, v)
    assert calls == [1, 1]

    # vmap over a leading dimension: every call inside sees functorch's level.
    seen = []
    monkeypatch.setattr(fat, "_forward_op", lambda *a: seen.append(fat._plain_context()) or real_op(*a))
    try:
        torch.func.vmap(lambda x: fat.attention(x, k, v))(q.unsqueeze(0))
    except Exception:  # no batching rule for the custom op: what matters is which path was taken
        pass
    assert seen and not any(seen)
    assert fat._plain_context()
