"""Join cuda_forward_bench and sdpa_anchor JSON lines (one job) into a markdown table of
TFLOP/s and fastattn's ratio to each SDPA backend."""
import json
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def main():
    ours, theirs = load(sys.argv[1]), load(sys.argv[2])
    peak = next((r["tflops"] for r in theirs if r.get("tag") == "gemm_peak"), None)
    if peak:
        print(f"bf16 GEMM peak measured in this job: {peak:.0f} TFLOP/s\n")
    print("| shape | causal | fastattn TFLOP/s | % GEMM peak | flash | cudnn | math | vs flash | vs cudnn | vs math |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in ours:
        if "error" in r:
            print(f"| {r.get('tag')} | | error: {r['error']} | | | | | | | |")
            continue
        key = (r["tag"], r["b"], r["s"], r["h"], r["d"], r["causal"])
        anchor = {t["backend"]: t.get("tflops") for t in theirs
                  if (t.get("tag"), t.get("b"), t.get("s"), t.get("h"), t.get("d"), t.get("causal")) == key}
        cells = [f"{anchor[b]:.0f}" if anchor.get(b) else "-" for b in ("flash", "cudnn", "math")]
        ratios = [f"{r['tflops'] / anchor[b]:.2f}x" if anchor.get(b) else "-" for b in ("flash", "cudnn", "math")]
        pct = f"{100 * r['tflops'] / peak:.0f}%" if peak else "-"
        print(f"| b{r['b']} h{r['h']} s{r['s']} d{r['d']} | {r['causal']} | {r['tflops']:.0f} | {pct} | "
              + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
