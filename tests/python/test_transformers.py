"""attn_implementation="fastattn" in HuggingFace transformers, against "sdpa" (and "eager" where
SDPA lacks the feature), on tiny random models built from configs (no download), fp32 on the CPU.

Every case also checks that fastattn, not the SDPA fallback, computed the attention: the
fallback is patched to fail, except in the test that exercises it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import fastattn.integrations.transformers as fastattn_hf  # noqa: E402

try:
    fastattn_hf.register()
except ImportError as e:  # transformers too old for the integration
    pytest.skip(str(e), allow_module_level=True)

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

VOCAB = 128
ATOL = 1e-4  # fp32 logits of O(1) magnitude, through 2 layers


def llama(num_kv_heads=4, layers=2, seed=0, **extra):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=num_kv_heads, max_position_embeddings=512,
                         pad_token_id=0, **extra)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # logits of O(1) rather than O(0.01): clear argmax margins
        model.lm_head.weight.mul_(30.0)
    return model


@pytest.fixture(autouse=True)
def no_sdpa_fallback(monkeypatch, request):
    if "falls_back" in request.node.name:
        return
    calls = []
    monkeypatch.setattr(fastattn_hf, "_sdpa_fallback", lambda *a, **k: calls.append(a) or
                        pytest.fail("fastattn fell back to SDPA"))


def counting(monkeypatch):
    """Counts fastattn calls made by the integration: fastattn.torch.attention calls record their
    keyword arguments, KV-cache calls (the static-cache route) {"route": "kv_cache"}."""
    calls = []
    real = fastattn_hf._fat.attention
    real_kv = fastattn_hf._kv_cache_call

    def attention(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    def kv_cache_call(*args, **kwargs):
        calls.append({"route": "kv_cache"})
        return real_kv(*args, **kwargs)

    monkeypatch.setattr(fastattn_hf._fat, "attention", attention)
    monkeypatch.setattr(fastattn_hf, "_kv_cache_call", kv_cache_call)
    return calls


def logits(model, implementation, **inputs):
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model(**inputs).logits


def generate(model, implementation, **kwargs):
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model.generate(do_sample=False, pad_token_id=0, **kwargs)


def tokens(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=g)


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1], ids=["mha", "gqa2", "mqa"])
def test_prefill_logits(num_kv_heads, monkeypatch):
    model = llama(num_kv_heads)
    ids = tokens(2, 37, 1)
    calls = counting(monkeypatch)
    got = logits(model, "fastattn", input_ids=ids)
    assert len(calls) == 2  # one dense call per layer
    expected = logits(model, "sdpa", input_ids=ids)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("num_kv_heads", [4, 2], ids=["mha", "gqa2"])
def test_generate_greedy_equal(num_kv_heads, monkeypatch):
    model = llama(num_kv_heads, seed=1)
    ids = tokens(2, 19, 2)
    mask = torch.ones_like(ids)
    calls = counting(monkeypatch)
    got = generate(model, "fastattn", input_ids=ids, attention_mask=mask, max_new_tokens=12)
    assert len(calls) >= 2 * 12
    expected = generate(model, "sdpa", input_ids=ids, attention_mask=mask, max_new_tokens=12)
    assert torch.equal(got, expected)


def test_left_padding(monkeypatch):
    """A batch of prompts of different lengths, padded on the left, through prefill and decode."""
    model = llama(2, seed=2)
    lengths = [23, 9, 16]
    ids = torch.zeros(3, max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, -n:] = tokens(1, n, 10 + row)
        mask[row, -n:] = 1
    calls = counting(monkeypatch)
    got = logits(model, "fastattn", input_ids=ids, attention_mask=mask)
    assert "cu_seqlens_q" in calls[0]  # the packed (variable-length) path
    expected = logits(model, "sdpa", input_ids=ids, attention_mask=mask)
    real = mask.bool()  # padding rows' logits are meaningless in both
    torch.testing.assert_close(got[real], expected[real], atol=ATOL, rtol=ATOL)
    # Each row alone, unpadded, gives the same logits.
    for row, n in enumerate(lengths):
        alone = logits(model, "fastattn", input_ids=ids[row:row + 1, -n:])
        torch.testing.assert_close(got[row, -n:], alone[0], atol=ATOL, rtol=ATOL)
    out = generate(model, "fastattn", input_ids=ids, attention_mask=mask, max_new_tokens=10)
    ref = generate(model, "sdpa", input_ids=ids, attention_mask=mask, max_new_tokens=10)
    assert torch.equal(out, ref)


def test_right_padding_prefill():
    model = llama(2, seed=3)
    ids = tokens(2, 20, 4)
    mask = torch.ones_like(ids)
    mask[1, 13:] = 0
    got = logits(model, "fastattn", input_ids=ids, attention_mask=mask)
    expected = logits(model, "sdpa", input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("batch", [1, 2])
def test_static_cache(batch, monkeypatch):
    """generate with a StaticCache: the keys are the whole capacity, the mask says which slots
    are filled."""
    model = llama(2, seed=4)
    ids = tokens(batch, 11, 5)
    mask = torch.ones_like(ids)
    got = generate(model, "fastattn", input_ids=ids, attention_mask=mask, max_new_tokens=8,
                   cache_implementation="static")
    expected = generate(model, "sdpa", input_ids=ids, attention_mask=mask, max_new_tokens=8,
                        cache_implementation="static")
    assert torch.equal(got, expected)


@pytest.mark.parametrize("batch", [1, 2])
def test_static_cache_without_mask(batch, monkeypatch):
    """A StaticCache and no attention_mask (a decode loop of one's own, as for CUDA graphs): the
    filled length stays on the device, and every batch runs fastattn's KV-cache plan on the
    cache in place (GQA-packed decode kernel), not the variable-length path."""
    from transformers import StaticCache

    model = llama(2, seed=5)
    ids = tokens(batch, 13, 6)
    calls = counting(monkeypatch)
    results = {}
    for implementation in ("fastattn", "sdpa"):
        model.set_attn_implementation(implementation)
        cache = StaticCache(config=model.config, max_cache_len=64)
        steps = []
        with torch.no_grad():
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            position = ids.shape[1]
            for _ in range(5):
                steps.append(out.logits[:, -1])
                token = out.logits[:, -1:].argmax(-1)
                out = model(input_ids=token, past_key_values=cache, use_cache=True,
                            position_ids=torch.tensor([[position]] * batch))
                position += 1
        results[implementation] = torch.stack(steps)
    assert len(calls) == 2 * 6
    # Decode: the cache's filled length reaches fastattn on the device, as a KV-cache call's
    # cache_seqlens (the prefill into the empty cache knows its length on the host).
    assert all(c.get("route") == "kv_cache" for c in calls[2:])
    plans = [p for key, p in fastattn_hf._KV_PLANS.items() if key[2][0] == batch and key[2][1] == 1]
    assert plans and all("kv_cache" in p.choice.kernel for p in plans)
    torch.testing.assert_close(results["fastattn"], results["sdpa"], atol=ATOL, rtol=ATOL)


def test_sliding_window():
    """Mistral with a window shorter than the prompt: the window comes with the mask."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(6)
    config = MistralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           sliding_window=7, max_position_embeddings=512, pad_token_id=0)
    model = MistralForCausalLM(config).eval()
    ids = tokens(2, 25, 7)
    mask = torch.ones_like(ids)
    mask[1, :6] = 0  # left padding
    got = logits(model, "fastattn", input_ids=ids, attention_mask=mask)
    expected = logits(model, "sdpa", input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=ATOL, rtol=ATOL)
    out = generate(model, "fastattn", input_ids=ids, attention_mask=mask, max_new_tokens=10)
    ref = generate(model, "sdpa", input_ids=ids, attention_mask=mask, max_new_tokens=10)
    assert torch.equal(out, ref)


def test_softcap_gemma2():
    """Gemma 2: logit softcapping and alternating sliding/full layers, against eager (SDPA has
    no softcap)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(7)
    config = Gemma2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, sliding_window=8, attn_logit_softcapping=2.0,
                          query_pre_attn_scalar=16, max_position_embeddings=512, pad_token_id=0)
    model = Gemma2ForCausalLM(config).eval()
    with torch.no_grad():  # attention scores of O(10), so that a softcap of 2 bites
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    ids = tokens(1, 21, 8)
    got = logits(model, "fastattn", input_ids=ids)
    expected = logits(model, "eager", input_ids=ids)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=ATOL)
    # The softcap matters at this scale: without it the logits differ.
    model.config.attn_logit_softcapping = None
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    uncapped = logits(model, "eager", input_ids=ids)
    assert (uncapped - expected).abs().max() > 10 * ATOL


def test_dropout_raises():
    model = llama(2, attention_dropout=0.1)
    model.train()
    model.set_attn_implementation("fastattn")
    with pytest.raises(ValueError, match="dropout"):
        model(input_ids=tokens(1, 8, 9))


def test_training_gradients():
    """Training (dropout 0): gradients through the fastattn custom op match SDPA's."""
    model = llama(2, seed=8)
    model.train()
    ids = tokens(2, 16, 11)
    grads = {}
    for implementation in ("fastattn", "sdpa"):
        model.zero_grad()
        model.set_attn_implementation(implementation)
        model(input_ids=ids, labels=ids).loss.backward()
        grads[implementation] = model.model.layers[0].self_attn.q_proj.weight.grad.clone()
    torch.testing.assert_close(grads["fastattn"], grads["sdpa"], atol=1e-4, rtol=1e-3)


def test_4d_mask_falls_back_to_sdpa(caplog):
    """A 4-D mask (here one the caller built) has no fastattn kernel: the layer runs SDPA."""
    model = llama(2, seed=9)
    module = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(12)
    q = torch.randn(1, 4, 6, 16, generator=g)
    k, v = torch.randn(1, 2, 6, 16, generator=g), torch.randn(1, 2, 6, 16, generator=g)
    mask = torch.rand(1, 1, 6, 6, generator=g) > 0.3
    mask[..., 0] = True
    with caplog.at_level("WARNING"):
        got, _ = fastattn_hf.attention_forward(module, q, k, v, mask, scaling=0.25)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    expected, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
    torch.testing.assert_close(got, expected)


def test_unrecognised_mask_pattern_falls_back():
    """Mask functions fastattn cannot express (an and-overlay here) get SDPA's exact 4-D mask."""
    from transformers.masking_utils import and_masks, causal_mask_function

    def even_keys(batch_idx, head_idx, q_idx, kv_idx):
        return kv_idx % 2 == 0

    mask = fastattn_hf.attention_mask(batch_size=1, q_length=5, kv_length=5,
                                      mask_function=and_masks(causal_mask_function, even_keys))
    assert mask.dim() == 4 and mask.dtype == torch.bool
    assert mask[0, 0, 4].tolist() == [True, False, True, False, True]


def test_mask_kinds():
    """What the mask function hands the layers."""
    from transformers.masking_utils import sliding_window_causal_mask_function

    assert fastattn_hf.attention_mask(batch_size=2, q_length=5, kv_length=5) is None
    prefix = fastattn_hf.attention_mask(batch_size=1, q_length=1, kv_length=10,
                                        q_offset=torch.tensor(3))
    assert prefix._fastattn.kind == "prefix"
    assert prefix[0].tolist() == [True] * 4 + [False] * 6
    assert prefix._fastattn.cache_seqlens.tolist() == [4]
    prefix2 = fastattn_hf.attention_mask(batch_size=2, q_length=1, kv_length=10,
                                         q_offset=torch.tensor(3))
    assert prefix2._fastattn.cache_seqlens.tolist() == [4, 4]
    window = fastattn_hf.attention_mask(
        batch_size=1, q_length=5, kv_length=5,
        mask_function=sliding_window_causal_mask_function(3))
    assert window._fastattn.kind == "all" and window._fastattn.window == 3


def test_static_cache_decode_reads_nothing_back(monkeypatch):
    """The decode step over a StaticCache at batch 1 without a mask reads no tensor value on the
    host (what capturing it in a CUDA graph needs): Tensor.item/__bool__/... raise meanwhile."""
    from transformers import StaticCache

    model = llama(2, seed=10)
    model.set_attn_implementation("fastattn")
    cache = StaticCache(config=model.config, max_cache_len=32)
    calls = counting(monkeypatch)
    with torch.no_grad():
        model(input_ids=tokens(1, 7, 13), past_key_values=cache, use_cache=True)
        for name in ("__bool__", "__int__", "__index__", "__float__", "item", "tolist"):
            def read(self, *args, _name=name, **kwargs):
                raise AssertionError(f"a host read (Tensor.{_name}) in the decode step")
            monkeypatch.setattr(torch.Tensor, name, read)
        model(input_ids=tokens(1, 1, 14), past_key_values=cache, use_cache=True,
              position_ids=torch.tensor([[7]]))
        monkeypatch.undo()
    assert calls[-1] == {"route": "kv_cache"}
