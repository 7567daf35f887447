"""A Llama-2-7B-shaped transformers model (random weights, bf16), attn_implementation="fastattn"
beside "sdpa" in the same process: prefill tokens/s and decode step time.

    python3 bench/cuda/transformers_llama.py OUT.json                  # the H200 job
    python3 bench/cuda/transformers_llama.py OUT.json --tiny --device cpu   # logic check, seconds

Model: LlamaForCausalLM from a config (no download): hidden 4096, 32 layers, 32 query heads, 32
KV heads (Llama-2-7B; --kv-heads 8 for GQA), MLP 11008, vocab 32000, head_dim 128; weights drawn
by transformers' initialiser on the device, bf16. One model; set_attn_implementation switches
between the implementations, measured alternately per point.

Prefill: one forward over [1, L] tokens without a cache (logits of the last token only), causal;
3 timed calls after one warm-up, each between two CUDA events; tokens/s = L / median.

Decode: batch 1, a StaticCache of capacity context + 64, its first `context` slots filled with
random K/V (the values do not change the time), then one-token steps. transformers' own
generate loop would hide the attention time behind host time (a 32-layer step is hundreds of
small launches) and its DynamicCache copies the whole cache at every step (torch.cat), so the
step is our own: model(input_ids, position_ids, past_key_values=static cache) captured once in a
CUDA graph (torch.cuda.graph) and replayed `--steps` times (each replay appends one token, so
the context grows from `context` to `context + steps`), timed with CUDA events around the
replays; median over 5 such runs. The position id stays fixed (it does not change the time).
The eager step (the same call without the graph) is reported beside it. With "fastattn" the
captured step runs fastattn's KV-cache attention on the static cache in place (a KVCachePlan per
shape, made in the eager warm-up steps; the filled length on the device as cache_seqlens;
fastattn.integrations.transformers); with "sdpa", transformers' SDPA path with its boolean mask.

Attention alone: the decode attention call of one layer at the same contexts, fastattn.torch
(dense cache slice) and torch SDPA on the same tensors, 50 calls between CUDA events.

Agreement: last-token logits of fastattn and sdpa on the same input (prefill), and of the first
decode step from the same cache, max |difference| and whether the argmax agrees.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Dict, List

import torch

IMPLEMENTATIONS = ("fastattn", "sdpa")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("output", help="JSON file to write")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true",
                   help="a 2-layer model with hidden 64 and short sequences: checks the logic")
    p.add_argument("--kv-heads", type=int, default=None, help="default 32 (Llama-2-7B); tiny 2")
    p.add_argument("--prefill", default=None, help="comma-separated lengths (default 2k,8k,16k)")
    p.add_argument("--decode", default=None, help="comma-separated contexts (default 4k,32k)")
    p.add_argument("--steps", type=int, default=32, help="decode steps per timed run")
    p.add_argument("--implementations", default=",".join(IMPLEMENTATIONS))
    args = p.parse_args(argv)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    args.prefill = ints(args.prefill or ("32,64" if args.tiny else "2048,8192,16384"))
    args.decode = ints(args.decode or ("48,96" if args.tiny else "4096,32768"))
    args.implementations = [x for x in args.implementations.split(",") if x]
    return args


def llama_config(args):
    from transformers import LlamaConfig

    longest = max(args.prefill + [c + 64 + args.steps for c in args.decode])
    if args.tiny:
        return LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=args.kv_heads or 2,
                           max_position_embeddings=longest, pad_token_id=0)
    return LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=args.kv_heads or 32, max_position_embeddings=longest,
                       rms_norm_eps=1e-5, pad_token_id=0)


class Timer:
    """Seconds of fn(), with CUDA events on CUDA and perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def __call__(self, fn: Callable[[], Any]) -> float:
        if not self.cuda:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / 1e3


def run_point(errors: List[Dict[str, Any]], what: Dict[str, Any], fn: Callable[[], Dict]):
    """fn's row, or an error row; the job goes on either way."""
    try:
        row = {**what, **fn()}
    except Exception as e:  # noqa: BLE001 - a failed point is data, not the end of the job
        row = {**what, "error": f"{type(e).__name__}: {e}"}
        errors.append({**what, "traceback": traceback.format_exc(limit=6)})
    print(json.dumps(row), flush=True)
    return row


def prefill(model, args, timer, device, errors) -> List[Dict[str, Any]]:
    rows = []
    vocab = model.config.vocab_size
    for length in args.prefill:
        ids = torch.randint(1, vocab, (1, length), device=device)
        last = {}
        for impl in args.implementations:
            def measure():
                model.set_attn_implementation(impl)
                call = lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1)  # noqa
                with torch.no_grad():
                    last[impl] = call().logits[0, -1].float()
                    times = [timer(call) for _ in range(3)]
                t = statistics.median(times)
                return {"ms": t * 1e3, "tokens_per_s": length / t,
                        "times_ms": [x * 1e3 for x in times]}
            rows.append(run_point(errors, {"pass": "prefill", "impl": impl, "seqlen": length},
                                  measure))
        if len(last) == 2:
            rows.append(agreement("prefill", length, *last.values()))
        torch.cuda.empty_cache() if timer.cuda else None
    return rows


def agreement(what, size, a, b):
    row = {"pass": f"{what}_agreement", "seqlen": size,
           "max_abs_logit_diff": float((a - b).abs().max()),
           "max_abs_logit": float(b.abs().max()),
           "argmax_equal": bool(a.argmax() == b.argmax())}
    print(json.dumps(row), flush=True)
    return row


def static_cache(model, context, capacity, device):
    from transformers import StaticCache

    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    cache = StaticCache(config=cfg, max_cache_len=capacity)
    cache.early_initialization(1, cfg.num_key_value_heads, head_dim, model.dtype, device)
    gen = torch.Generator(device=device).manual_seed(1)
    for layer in cache.layers:
        layer.keys.normal_(generator=gen)
        layer.values.normal_(generator=gen)
    set_length(cache, context)
    return cache


def set_length(cache, n):
    for layer in cache.layers:
        layer.cumulative_length.fill_(n)


def decode(model, args, timer, device, errors) -> List[Dict[str, Any]]:
    rows = []
    for context in args.decode:
        cache = static_cache(model, context, context + 64 + args.steps, device)
        token = torch.ones(1, 1, dtype=torch.long, device=device)
        position = torch.full((1, 1), context, dtype=torch.long, device=device)

        def step():
            return model(input_ids=token, position_ids=position, past_key_values=cache,
                         use_cache=True, logits_to_keep=1).logits

        first = {}
        for impl in args.implementations:
            def measure():
                model.set_attn_implementation(impl)
                out: Dict[str, Any] = {"steps": args.steps}
                with torch.no_grad():
                    set_length(cache, context)
                    first[impl] = step()[0, -1].float()
                    for _ in range(2):  # warm-up
                        step()
                    runs = []
                    for _ in range(3):
                        set_length(cache, context)
                        runs.append(timer(lambda: [step() for _ in range(args.steps)]))
                    out["eager_step_ms"] = statistics.median(runs) / args.steps * 1e3
                    if timer.cuda:
                        try:  # a failed capture keeps the eager figure
                            out.update(graph_steps(step, cache, context, args.steps, timer))
                        except Exception as e:  # noqa: BLE001
                            out["graph_error"] = f"{type(e).__name__}: {e}"
                            errors.append({"pass": "decode_graph", "impl": impl,
                                           "context": context,
                                           "traceback": traceback.format_exc(limit=6)})
                return out
            rows.append(run_point(errors, {"pass": "decode", "impl": impl, "context": context},
                                  measure))
        if len(first) == 2:
            rows.append(agreement("decode", context, *first.values()))
        del cache
        torch.cuda.empty_cache() if timer.cuda else None
    return rows


def graph_steps(step, cache, context, steps, timer) -> Dict[str, Any]:
    """The decode step captured in a CUDA graph; the median per-step time of 5 runs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph asks
        for _ in range(3):
            set_length(cache, context)
            step()
    torch.cuda.current_stream().wait_stream(side)
    set_length(cache, context)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    runs = []
    for _ in range(5):
        set_length(cache, context)
        runs.append(timer(lambda: [graph.replay() for _ in range(steps)]))
    del graph
    return {"graph_step_ms": statistics.median(runs) / steps * 1e3,
            "graph_runs_ms": [r / steps * 1e3 for r in runs]}


def attention_only(model, args, timer, device, errors) -> List[Dict[str, Any]]:
    """One layer's decode attention: fastattn.torch vs torch SDPA on the same tensors."""
    import fastattn.torch as fat

    cfg = model.config
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = cfg.hidden_size // heads
    rows = []
    for context in args.decode:
        # transformers' cache layout [batch, kv_heads, seqlen, head_dim]; fastattn reads it
        # through transposed views.
        k = torch.randn(1, kv_heads, context, head_dim, device=device, dtype=model.dtype)
        v = torch.randn_like(k)
        q = torch.randn(1, heads, 1, head_dim, device=device, dtype=model.dtype)
        calls = {
            "fastattn": lambda: fat.attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2)),
            "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, enable_gqa=heads != kv_heads),
        }
        for impl, call in calls.items():
            def measure():
                with torch.no_grad():
                    for _ in range(5):
                        call()
                    t = statistics.median(timer(lambda: [call() for _ in range(50)]) / 50
                                          for _ in range(3))
                kv_bytes = 2 * k.numel() * k.element_size()
                return {"us": t * 1e6, "kv_gb_per_s": kv_bytes / t / 1e9}
            rows.append(run_point(errors, {"pass": "attention_decode", "impl": impl,
                                           "context": context}, measure))
        del k, v
    return rows


def summary(rows) -> List[str]:
    """fastattn / sdpa per point, as lines."""
    lines = []
    by = {}
    for r in rows:
        if "error" in r or r.get("impl") not in IMPLEMENTATIONS:
            continue
        by.setdefault((r["pass"], r.get("seqlen", r.get("context"))), {})[r["impl"]] = r
    for (what, size), pair in by.items():
        if len(pair) != 2:
            continue
        f, s = pair["fastattn"], pair["sdpa"]
        if what == "prefill":
            lines.append(f"prefill {size}: fastattn {f['tokens_per_s']:.0f} tok/s, sdpa "
                         f"{s['tokens_per_s']:.0f} tok/s ({f['tokens_per_s'] / s['tokens_per_s']:.3f}x)")
        elif what == "decode":
            key = "graph_step_ms" if "graph_step_ms" in f and "graph_step_ms" in s else "eager_step_ms"
            lines.append(f"decode {size} ({key}): fastattn {f[key]:.3f} ms, sdpa {s[key]:.3f} ms "
                         f"(sdpa/fastattn {s[key] / f[key]:.3f}; bar: fastattn not slower)")
        elif what == "attention_decode":
            lines.append(f"attention decode {size}: fastattn {f['us']:.1f} us, sdpa "
                         f"{s['us']:.1f} us ({f['kv_gb_per_s']:.0f} vs {s['kv_gb_per_s']:.0f} GB/s)")
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    import transformers

    import fastattn
    import fastattn.integrations.transformers as fastattn_hf

    fastattn_hf.register()
    device = torch.device(args.device)
    dtype = torch.bfloat16
    torch.manual_seed(0)
    config = llama_config(args)
    t0 = time.perf_counter()
    from transformers import LlamaForCausalLM

    with device:
        model = LlamaForCausalLM._from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.eval()
    timer = Timer(device)
    timer.sync()
    print(f"model built in {time.perf_counter() - t0:.1f} s: "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters", flush=True)
    errors: List[Dict[str, Any]] = []
    rows = []
    rows += prefill(model, args, timer, device, errors)
    rows += decode(model, args, timer, device, errors)
    rows += attention_only(model, args, timer, device, errors)
    lines = summary(rows)
    print("\n".join(lines))
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "fastattn": fastattn.__version__, "tiny": args.tiny,
        "config": {k: getattr(config, k) for k in ("hidden_size", "num_hidden_layers",
                                                   "num_attention_heads", "num_key_value_heads",
                                                   "intermediate_size", "vocab_size")},
        "dtype": str(dtype), "method": __doc__, "rows": rows, "summary": lines, "errors": errors,
    }
    with open(args.output, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.output}; {len(errors)} failed points")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
