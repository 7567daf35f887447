"""Judge issue 15's bar sweep: fastattn's sm90 forward against PyTorch SDPA's cuDNN backend, from
the JSON lines of one job (cuda_bench sweep90, once per variant, and sdpa_anchor.py sweep90).

    python3 bench/cuda/sweep_sm90.py JOB.jsonl [--out RESULT.json]

Rows join on (b, sq, sk, h, hkv, d, causal). A fastattn row's variant is its "variant" field
(tools/dev/gpu-sm90.sh tags the FASTATTN_CUDA_SM90_SCHEDULER=grid run "sm90-grid"), "fastattn"
when absent. Prints, per shape, TFLOP/s of each variant, cuDNN and flash, and each variant's
ratio to cuDNN (time ratio: both use flash-attn's FLOP count); then per variant the bars
(issue 15): the geometric mean of the ratios over the sweep's shapes with seqlen >= 2k
(>= 1.05), their minimum (>= 0.97), the ratios at seqlen 512 and 1k (>= 0.90), and the
b1 h16 s32k d128 row (>= 1.0). --out writes all of it as one JSON object.
"""
import argparse
import json
import math
import sys


def key(r):
    return (r.get("b"), r.get("sq"), r.get("sk"), r.get("h"), r.get("hkv"), r.get("d"), r.get("causal"))


def label(k):
    b, sq, sk, h, hkv, d, causal = k
    heads = f"h{h}" if h == hkv else f"h{h}/{hkv}"
    return f"b{b} {heads} s{sq} d{d}{' causal' if causal else ''}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jsonl")
    p.add_argument("--out")
    args = p.parse_args()
    rows = []
    for line in open(args.jsonl):
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    table, kernels, order, variants = {}, {}, [], []
    for r in rows:
        if r.get("kind") == "device" or r.get("pass", "fwd") != "fwd" or "tflops" not in r:
            continue
        if r.get("mode") != "sweep90":
            continue
        who = r.get("variant", "fastattn") if r["source"] == "fastattn" else r.get("backend")
        k = key(r)
        if k not in table:
            table[k] = {}
            order.append(k)
        table[k][who] = r["tflops"]
        if r["source"] == "fastattn":
            kernels.setdefault(k, {})[who] = r.get("kernel")
            if who not in variants:
                variants.append(who)
    long_row = (1, 32768, 32768, 16, 16, 128, False)
    shapes = []
    print("shape | " + " | ".join(variants) + " | cudnn | flash | " + " | ".join(f"{v}/cudnn" for v in variants))
    for k in order:
        v = table[k]
        c = v.get("cudnn")
        ratios = {w: (v[w] / c if w in v and c else None) for w in variants}
        cells = [f"{v[w]:.0f}" if w in v else "-" for w in variants + ["cudnn", "flash"]]
        print(f"{label(k)} | " + " | ".join(cells) + " | " +
              " | ".join(f"{ratios[w]:.3f}" if ratios[w] else "-" for w in variants))
        shapes.append({"shape": label(k), "b": k[0], "sq": k[1], "sk": k[2], "h": k[3], "hkv": k[4], "d": k[5],
                       "causal": k[6], "tflops": v, "ratio_vs_cudnn": ratios, "kernel": kernels.get(k, {})})
    summary = {}
    for w in variants:
        bar = [s["ratio_vs_cudnn"][w] for s in shapes
               if s["sq"] >= 2048 and (s["b"], s["sq"], s["sk"], s["h"], s["hkv"], s["d"], s["causal"]) != long_row
               and s["ratio_vs_cudnn"][w]]
        short = {s["shape"]: s["ratio_vs_cudnn"][w] for s in shapes if s["sq"] in (512, 1024)}
        long_ratio = next((s["ratio_vs_cudnn"][w] for s in shapes
                           if (s["b"], s["sq"], s["sk"], s["h"], s["hkv"], s["d"], s["causal"]) == long_row), None)
        geo = math.exp(sum(math.log(x) for x in bar) / len(bar)) if bar else None
        worst = min(bar) if bar else None
        short_min = min((x for x in short.values() if x), default=None)
        summary[w] = {"geomean_s_ge_2k": geo, "min_s_ge_2k": worst, "shapes_s_ge_2k": len(bar),
                      "s512_1k": short, "min_s512_1k": short_min, "b1_h16_s32k_d128": long_ratio,
                      "bars_met": {"geomean >= 1.05": geo is not None and geo >= 1.05,
                                   "min >= 0.97": worst is not None and worst >= 0.97,
                                   "s512/1k >= 0.90": short_min is not None and short_min >= 0.90,
                                   "s32k >= 1.0": long_ratio is not None and long_ratio >= 1.0}}
        fmt = lambda x: f"{x:.3f}" if x is not None else "-"
        print(f"[{w}] s>=2k: geomean {fmt(geo)} over {len(bar)} shapes, min {fmt(worst)}; "
              f"s512/1k min {fmt(short_min)} ({', '.join(f'{k}: {fmt(x)}' for k, x in short.items())}); "
              f"b1 h16 s32k d128 {fmt(long_ratio)}")
    devices = [r for r in rows if r.get("kind") == "device"]
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"kind": "cuda_sm90_sweep", "what": "issue 15 bar sweep, bf16 forward TFLOP/s (flash-attn FLOPs), "
                       "fastattn sm90 variants beside SDPA cuDNN and flash, one job",
                       "devices": devices, "shapes": shapes, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
