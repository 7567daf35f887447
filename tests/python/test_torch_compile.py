"""torch.compile traces fastattn.torch.attention without graph breaks, forward and backward."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import fastattn.torch as fat  # noqa: E402


class AttentionBlock(torch.nn.Module):
    """A small pre-norm self-attention block with GQA, in fastattn's [batch, seq, heads, dim]."""

    def __init__(self, dim=64, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm = torch.nn.LayerNorm(dim)
        self.q = torch.nn.Linear(dim, heads * self.head_dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim)
        k, v = self.kv(h).view(b, s, 2, self.kv_heads, self.head_dim).unbind(2)  # strided views
        out = fat.attention(q, k, v, causal=True)
        return x + self.proj(out.reshape(b, s, -1))


def inputs():
    torch.manual_seed(0)
    block = AttentionBlock()
    x = torch.randn(2, 24, 64, requires_grad=True)
    return block, x


def test_dynamo_sees_no_graph_breaks():
    block, x = inputs()
    explanation = torch._dynamo.explain(block)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes]
    assert any("fastattn.forward" in op for op in ops), ops


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_block_matches_eager_with_gradients(backend):
    block, x = inputs()
    eager = block(x)
    eager.square().sum().backward()
    eager_grads = [x.grad] + [p.grad for p in block.parameters()]

    torch._dynamo.reset()
    block.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    compiled = torch.compile(block, backend=backend, fullgraph=True)
    out = compiled(x2)
    out.square().sum().backward()
    compiled_grads = [x2.grad] + [p.grad for p in block.parameters()]

    torch.testing.assert_close(out, eager, atol=1e-5, rtol=1e-5)
    for got, want in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
