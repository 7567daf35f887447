#!/usr/bin/env python3
"""Issue 17's CUDA decode measurements as markdown: the rows of `fastattn_kv_cache_bench` and
`bench/cuda/sdpa_anchor.py kv_decode kv_multitoken`, measured in the same job (joined on tag,
b, sq, sk, h, hkv, d).

    python3 bench/render_kv_decode.py ROWS.jsonl|RESULT.json [--json OUT.json] [--machine nvidia-h200]

Tables: forward() decode on a contiguous cache (GB/s of K+V, % of the device-to-device copy
bandwidth measured in the job, ratios to SDPA cuDNN and flash), the KV-cache kernel on paged
caches against the contiguous one, multi-token decode against cuDNN.
"""
import argparse
import datetime
import json


def key(r):
    return (r["tag"], r["b"], r["sq"], r["sk"], r["h"], r["hkv"], r["d"])


def render(rows):
    hbm = max((r.get("gbs", 0) for r in rows if r.get("kind") in ("hbm", "hbm_best")), default=0)
    ours = [r for r in rows if r.get("source") == "fastattn" and "tag" in r and r.get("repeat", 1) == 1]
    again = {key(r): r for r in rows if r.get("source") == "fastattn" and r.get("repeat") == 2 and "ms" in r}
    sdpa = {}
    for r in rows:
        if r.get("source") == "sdpa" and "ms" in r:
            sdpa[key(r) + (r["backend"],)] = r["ms"]
    lines = [f"Device-to-device copy bandwidth in the same job: {hbm:.0f} GB/s (bytes read + written). "
             "GB/s counts the K+V bytes once.", ""]

    def ratio(other, ms):
        return f"{other / ms:.2f}x" if other else "-"

    lines += ["| heads q/kv | batch | kv | fastattn ms | K+V GB/s | % of copy | cuDNN ms | flash ms "
              "| vs cuDNN | vs flash | 2nd run ms | kernel |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted((r for r in ours if r["tag"] == "kv_decode"), key=lambda r: (r["h"], r["hkv"], r["b"], r["sk"])):
        head = f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k |"
        if "ms" not in r:
            lines.append(head + f" {r.get('skipped') or r.get('error', '?')} | | | | | | | | |")
            continue
        cudnn, flash = sdpa.get(key(r) + ("cudnn",)), sdpa.get(key(r) + ("flash",))
        frac = 100 * r["kv_gbs"] / hbm if hbm else 0
        second = f"{again[key(r)]['ms']:.4f}" if key(r) in again else "-"
        lines.append(head + f" {r['ms']:.4f} | {r['kv_gbs']:.0f} | {frac:.0f} | "
                     f"{cudnn or 0:.4f} | {flash or 0:.4f} | {ratio(cudnn, r['ms'])} | {ratio(flash, r['ms'])} "
                     f"| {second} | `{r.get('kernel', '')}` |")

    paged = [r for r in ours if r["tag"] == "kv_paged" and "ms" in r]
    if paged:
        lines += ["", "| heads q/kv | batch | kv | page size | ms | K+V GB/s | vs contiguous | kernel |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in sorted(paged, key=lambda r: (r["b"], r["sk"], r["page_size"])):
            base = next((c for c in paged if c["page_size"] == 0 and key(c) == key(r)), None)
            rel = f"{base['ms'] / r['ms']:.2f}x" if base else "-"
            size = "contiguous" if r["page_size"] == 0 else str(r["page_size"])
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {size} | {r['ms']:.4f} | "
                         f"{r['kv_gbs']:.0f} | {rel} | `{r['kernel']}` |")

    multi = [r for r in ours if r["tag"] == "kv_multitoken" and "ms" in r]
    if multi:
        lines += ["", "| seqlen_q | batch | kv | fastattn ms | K+V GB/s | cuDNN ms | vs cuDNN | flash ms | vs flash "
                  "| kernel |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in sorted(multi, key=lambda r: r["sq"]):
            cudnn, flash = sdpa.get(key(r) + ("cudnn",)), sdpa.get(key(r) + ("flash",))
            lines.append(f"| {r['sq']} | {r['b']} | {r['sk'] // 1024}k | {r['ms']:.4f} | {r['kv_gbs']:.0f} | "
                         f"{cudnn or 0:.4f} | {ratio(cudnn, r['ms'])} | {flash or 0:.4f} | {ratio(flash, r['ms'])} "
                         f"| `{r.get('kernel', '')}` |")
    stages = [r for r in ours if r["tag"] == "kv_stages" and "ms" in r]
    if stages:
        lines += ["", "| heads q/kv | batch | kv | stages | ms | K+V GB/s | kernel |", "|---|---:|---:|---:|---:|---:|---|"]
        for r in stages:
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {r.get('stages')} | {r['ms']:.4f} | "
                         f"{r['kv_gbs']:.0f} | `{r['kernel']}` |")
    splits = [r for r in ours if r["tag"] == "kv_splits" and "ms" in r]
    if splits:
        lines += ["", "| heads q/kv | batch | kv | splits | ms | K+V GB/s | kernel |", "|---|---:|---:|---:|---:|---:|---|"]
        for r in splits:
            lines.append(f"| {r['h']}/{r['hkv']} | {r['b']} | {r['sk'] // 1024}k | {r.get('splits')} | {r['ms']:.4f} | "
                         f"{r['kv_gbs']:.0f} | `{r['kernel']}` |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows")
    p.add_argument("--json", help="write the result (kind cuda_kv_decode) here")
    p.add_argument("--machine", default="nvidia-h200")
    p.add_argument("--command", default="bash tools/dev/gpu-kvcache.sh")
    args = p.parse_args()
    text = open(args.rows).read()
    try:  # a saved result (bench/results/*kv_decode*.json) or the job's JSON lines
        rows = json.loads(text)["rows"]
    except (ValueError, KeyError, TypeError):
        rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    if args.json:
        result = {"kind": "cuda_kv_decode", "machine": args.machine, "rows": rows,
                  "context": {"timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                              "command": args.command}}
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(render(rows))


if __name__ == "__main__":
    main()
