"""bench/cuda/compare.py's bars and the docs block, on synthetic cuda_bench / sdpa_anchor rows
(no GPU needed): a missing CUDA backward must give FAIL rows, not a crash."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _load("cuda_compare", ROOT / "bench" / "cuda" / "compare.py")
render_performance = _load("render_performance", ROOT / "bench" / "render_performance.py")
NO_BACKWARD = "cuda backward: no CUDA backward kernel in this version"


def row(source, tag, pass_, b, sq, sk, h, d, causal, **extra):
    r = {"source": source, "mode": tag, "tag": tag, "pass": pass_, "b": b, "sq": sq, "sk": sk,
         "h": h, "hkv": h, "d": d, "causal": causal, "dtype": "bf16"}
    r.update(extra)
    return r


def synthetic_rows():
    fa = [{"source": "fastattn", "kind": "device", "mode": m, "gpu": "NVIDIA H200", "sms": 132,
           "timestamp_utc": "2026-11-30T10:00:00Z"} for m in ("short", "splitkv", "long")]
    sdpa = [{"source": "sdpa", "kind": "gemm_peak", "tflops": 700.0}]
    for d in (64, 128):
        for s in (2048, 8192):
            shape = (16384 // s, s, s, 2048 // d, d, False)
            fa.append(row("fastattn", "paper", "fwd", *shape, ms=1.0, tflops=300.0, tensor_bytes=1))
            fa.append(row("fastattn", "paper", "fwdbwd", *shape, error=NO_BACKWARD))
            sdpa.append(row("sdpa", "paper", "fwd", *shape, backend="flash", ms=1.2, tflops=250.0))
            sdpa.append(row("sdpa", "paper", "fwd", *shape, backend="math", ms=15.0, tflops=20.0))
            sdpa.append(row("sdpa", "paper", "fwdbwd", *shape, backend="flash", ms=3.0, tflops=350.0))
    kv_bytes = 2.0 * 65536 * 32 * 128 * 2
    fa.append({"source": "fastattn", "kind": "hbm", "mode": "splitkv", "gbs": 4000.0})
    for sq in (1, 4, 16):
        ms = kv_bytes / 3000e9 * 1e3  # 75 % of the copy bandwidth
        fa.append(row("fastattn", "splitkv", "fwd", 1, sq, 65536, 32, 128, False, ms=ms,
                      kv_gbs=kv_bytes / (ms / 1e3) / 1e9, tensor_bytes=1))
    for s in (32768, 65536, 131072):
        fa.append(row("fastattn", "long", "fwd", 1, s, s, 16, 128, True, ms=1.0, tflops=1.0,
                      tensor_bytes=s * 16 * 128 * 2 * 4, scratch_bytes=0))
        fa.append(row("fastattn", "long", "fwdbwd", 1, s, s, 16, 128, True, error=NO_BACKWARD))
    return fa, sdpa


def test_bars_from_synthetic_rows(tmp_path):
    fa, sdpa = synthetic_rows()
    args = types.SimpleNamespace(fastattn=tmp_path / "fa.jsonl", sdpa=tmp_path / "sdpa.jsonl")
    result = compare.build_result(fa, sdpa, args)
    status = {b["name"]: b["status"] for b in result["bars"]}
    assert result["machine"] == "nvidia-h200" and result["sweep"] == "short"
    assert status["fwd_vs_flash"] == "PASS"          # 1.2 ms / 1.0 ms on every shape
    assert status["fwd_vs_math_8k"] == "PASS"        # 15x
    assert status["fwdbwd_vs_flash"] == "FAIL"       # no backward: FAIL, not a crash
    assert status["splitkv_hbm"] == "PASS"           # 75 % >= 70 %
    assert status["long_memory_linear"] == "FAIL"    # forward linear, but fwd+bwd did not run
    assert status["determinism"] == "MISSING" and status["seqpar_fwd"] == "MISSING"
    fwd = next(b for b in result["bars"] if b["name"] == "fwd_vs_flash")
    assert abs(fwd["measured"] - 1.2) < 1e-9


def test_docs_block_keeps_the_cpu_blocks(tmp_path):
    fa, sdpa = synthetic_rows()
    args = types.SimpleNamespace(fastattn="fa", sdpa="sdpa")
    result = json.loads(json.dumps(compare.build_result(fa, sdpa, args)))  # as read from disk
    doc = ("# Performance\n<!-- results:begin -->\n<!-- result:bench_cpu:x:begin -->\nCPU\n"
           "<!-- result:bench_cpu:x:end -->\n<!-- results:end -->\n")
    once = render_performance.update(doc, result)
    twice = render_performance.update(once, result)
    assert once == twice  # the CUDA block is replaced, not appended again
    assert "<!-- result:bench_cpu:x:begin -->\nCPU\n" in once
    assert "<!-- result:cuda_bench:nvidia-h200:begin -->" in once
    assert "| fwd_vs_flash |" in once and "**FAIL**" in once
