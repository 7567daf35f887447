#!/usr/bin/env python3
"""The CUDA decode benchmark as a result: fastattn's forward for one query token over a
contiguous KV cache (`fastattn_cuda_bench decode`) beside PyTorch SDPA's flash and cuDNN backends
(`bench/cuda/sdpa_anchor.py decode`), measured in the same job, with GB/s of K+V and the
fraction of the device-to-device copy bandwidth measured in that job.

    python3 bench/render_decode.py ROWS.jsonl                 # print the table
    python3 bench/render_decode.py ROWS.jsonl --json OUT.json [--machine nvidia-h200]
                                                              # the result (kind cuda_decode) that
                                                              # tools/scripts/update-docs.sh renders
"""
import argparse
import datetime
import json


def kv_rows(rows):
    return [r for r in rows if r.get("tag") == "decode" and "ms" in r]


def render_cuda_decode(result):
    rows = result["rows"]
    hbm = max((r.get("gbs", 0) for r in rows if r.get("kind") in ("hbm", "hbm_best")), default=0)
    ctx = result.get("context", {})
    lines = [f"### CUDA decode on {result['machine']}", "",
             f"Measured {ctx.get('timestamp_utc', '?')[:10]} by `{ctx.get('command', '?')}`: bf16, d128, one "
             "query token, causal (a no-op for one bottom-right-aligned row; SDPA timed unmasked), "
             f"fastattn and SDPA in the same job. Device-to-device copy bandwidth, same job: {hbm:.0f} GB/s "
             "(bytes read + written). GB/s counts the K+V bytes once.", ""]

    def key(r):
        return (r["h"], r["hkv"], r["b"], r["sk"])

    ours = {key(r): r for r in kv_rows(rows) if r.get("source") == "fastattn"}
    lines += ["| heads q/kv | batch | kv len | fastattn ms | K+V GB/s | % of copy | SDPA flash ms "
              "| SDPA cuDNN ms | cuDNN time / fastattn time | fastattn kernel |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for k in sorted(ours):
        r = ours[k]
        sdpa = {s["backend"]: s["ms"] for s in kv_rows(rows) if s.get("source") == "sdpa" and key(s) == k}
        flash, cudnn = sdpa.get("flash"), sdpa.get("cudnn")
        frac = 100 * r.get("kv_gbs", 0) / hbm if hbm else 0
        ratio = f"{cudnn / r['ms']:.2f}x" if cudnn else "-"
        flash_ms = f"{flash:.4f}" if flash else "-"
        cudnn_ms = f"{cudnn:.4f}" if cudnn else "-"
        lines.append(f"| {k[0]}/{k[1]} | {k[2]} | {k[3] // 1024}k | {r['ms']:.4f} | {r.get('kv_gbs', 0):.0f} | "
                     f"{frac:.0f} | {flash_ms} | {cudnn_ms} | {ratio} | `{r.get('kernel', '')}` |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows")
    p.add_argument("--json", help="write the result (kind cuda_decode) here")
    p.add_argument("--machine", default="nvidia-h200")
    p.add_argument("--command", default="bash tools/dev/gpu-tests.sh (stage decode)")
    args = p.parse_args()
    rows = [json.loads(line) for line in open(args.rows) if line.startswith("{")]
    result = {"kind": "cuda_decode", "machine": args.machine, "rows": rows,
              "context": {"timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                          "command": args.command}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(render_cuda_decode(result))


if __name__ == "__main__":
    main()
