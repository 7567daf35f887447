"""Issue 16's bars from one device job of tools/dev/gpu-sm90-bwd.sh (stage bench): fastattn's
backward variants and PyTorch SDPA's cuDNN and flash backends, timed in the same job on the
same shapes, bf16.

    python3 tools/dev/sm90_bwd_summary.py OUT_DIR      # reads bench.jsonl, det.jsonl, mem.jsonl
                                                       # writes OUT_DIR/sm90_bwd_summary.json

Speed ratios are cuDNN's median time over the variant's (the same FLOP count on both sides, so
the ratio of TFLOP/s). Bars (issues show 16):
  forward+backward, seqlen >= 2k: geometric mean >= 1.05x cuDNN, no shape below 0.97x
  backward alone:                 geometric mean >= 1.05x cuDNN
  deterministic backward:         bitwise equal over its runs (10), >= 0.8x the default's speed
  memory:                         linear in the sequence length (b1 h16 d128 causal, 32k..128k):
                                  bytes per token within 10% from 32k to 128k
A bar with no rows to judge is "not measured", never a pass.
"""
import json
import math
import sys
from pathlib import Path

# sm90-default: the library's own choices (no FASTATTN_CUDA_SM90_BWD_DQ), the bars' row.
VARIANTS = ("sm90-default", "sm90-longest", "sm90-grouped", "sm90-atomic", "sm90-atomic-tiles", "sm90-bulk",
            "sm90-headmajor", "sm80-bwd", "sm90-plan-bulkdq")
# Tagged variants of extra builds (gpu-sm90-bwd.sh BUILD_VARIANTS: NAME-atomic, NAME-atomic-tiles,
# NAME-bulk), found in bench.jsonl; each gets the A/B "NAME build vs default build" per dQ mode.
MODES = ("atomic", "atomic-tiles", "bulk")
# A/B pairs of the sm90 backward's elements: (name, variant B, variant A, rows): A's speed over B's.
AB = (("bulk dQ vs atomic dQ", "sm90-atomic", "sm90-bulk", lambda k: True),
      ("atomic-tiles dQ vs atomic dQ", "sm90-atomic", "sm90-atomic-tiles", lambda k: True),
      ("longest first vs (batch, head)-major, causal rows", "sm90-headmajor", "sm90-atomic", lambda k: k[5]),
      # What sm90-default's order is depends on the tree timed (the results' README says).
      ("default order vs longest_first (FASTATTN_CUDA_SM90_BWD_ORDER), causal rows", "sm90-longest", "sm90-default",
       lambda k: k[5]),
      ("grouped (FASTATTN_CUDA_SM90_BWD_ORDER) vs default order, causal rows", "sm90-default", "sm90-grouped",
       lambda k: k[5]),
      ("sm90 backward (atomic) vs sm80 backward", "sm80-bwd", "sm90-atomic", lambda k: True),
      # gpu-sm90-bwd.sh PLAN_BULK=1: bulk dQ in the plan's own order (sm90-bulk runs longest_first).
      ("bulk dQ vs the plan's dQ, both in the plan's order", "sm90-default", "sm90-plan-bulkdq", lambda k: True))
ANCHORS = ("cudnn", "flash")


def rows(path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def shape_key(r):
    return (r.get("b"), r.get("h"), r.get("hkv"), r.get("sq"), r.get("d"), bool(r.get("causal")), r.get("pass"))


def shape_name(k):
    b, h, hkv, s, d, causal, p = k
    heads = f"h{h}" if h == hkv else f"h{h}/{hkv}"
    return f"b{b} {heads} s{s} d{d}{' causal' if causal else ''} {p}"


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    table = {}  # shape key -> {who: ms}
    kernels = {}
    for r in rows(out / "bench.jsonl"):
        if r.get("kind") or "ms" not in r or r.get("error"):
            continue
        who = r.get("variant", "fastattn") if r.get("source") == "fastattn" else r.get("backend")
        table.setdefault(shape_key(r), {})[who] = r["ms"]
        if r.get("source") == "fastattn":
            kernels[(shape_key(r), who)] = r.get("kernel_bwd", r.get("kernel"))
    summary = {"shapes": [], "ratios": {}, "bars": {}}
    seen = {w for v in table.values() for w in v}
    extra = tuple(sorted(w for w in seen if w not in VARIANTS + ANCHORS and any(w.endswith("-" + m) for m in MODES)))
    # sm90-grouped-gN (GROUP_SIZES): FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS=N, on causal rows.
    groups = tuple(sorted((w for w in seen if w.startswith("sm90-grouped-g") and w[14:].isdigit()),
                          key=lambda w: int(w[14:])))
    extra += groups
    variants = VARIANTS + extra
    ab = AB + tuple((f"{w[:-len(m) - 1]} build vs default build ({m} dQ)", f"sm90-{m}", w, lambda k: True)
                    for w in extra for m in MODES if w.endswith("-" + m))
    ab += tuple((f"{w[14:]} pairs a group (FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS) vs default, causal rows",
                 "sm90-default", w, lambda k: k[5]) for w in groups)
    whos = variants + ANCHORS
    print("shape | " + " | ".join(f"{w} ms" for w in whos) + " | " + " ".join(f"{w}/cudnn" for w in whos if w != "cudnn"))
    keyed = []  # (shape key, its summary entry)
    for k in sorted(table, key=lambda k: (k[6], k[4], k[5], k[3], k[2])):
        v = table[k]
        c = v.get("cudnn")
        ratio = {w: c / v[w] for w in whos if w != "cudnn" and c and v.get(w)}
        summary["shapes"].append({"shape": shape_name(k), "ms": v, "vs_cudnn": ratio,
                                  "kernel_bwd": {w: kernels.get((k, w)) for w in variants if (k, w) in kernels}})
        keyed.append((k, summary["shapes"][-1]))
        print(shape_name(k), "|", " | ".join(f"{v[w]:.3f}" if w in v else "-" for w in whos), "|",
              " ".join(f"{ratio[w]:.3f}" if w in ratio else "-" for w in whos if w != "cudnn"))

    def judge(who, pass_, min_seqlen):
        rs = [(c["vs_cudnn"][who], c["shape"]) for k, c in keyed
              if k[6] == pass_ and k[3] >= min_seqlen and who in c["vs_cudnn"]]
        if not rs:
            return None
        worst = min(rs)
        return {"rows": len(rs), "geomean": geomean([r for r, _ in rs]), "min": worst[0], "min_shape": worst[1]}

    for who in variants + ("flash",):
        fb = judge(who, "fwdbwd", 2048)
        b = judge(who, "bwd", 0)
        summary["ratios"][who] = {"fwdbwd_s>=2k": fb, "bwd": b, "fwdbwd_all": judge(who, "fwdbwd", 0)}
        verdict = []
        if fb:
            verdict.append(f"fwd+bwd s>=2k geomean {fb['geomean']:.3f} min {fb['min']:.3f} ({fb['min_shape']}) over "
                           f"{fb['rows']}: {'PASS' if fb['geomean'] >= 1.05 and fb['min'] >= 0.97 else 'FAIL'}")
        if b:
            verdict.append(f"bwd geomean {b['geomean']:.3f} min {b['min']:.3f} ({b['min_shape']}) over {b['rows']}: "
                           f"{'PASS' if b['geomean'] >= 1.05 else 'FAIL'}")
        print(f"{who} vs cuDNN: " + ("; ".join(verdict) if verdict else "not measured"))
        if who in variants:
            summary["bars"][who] = {
                "fwdbwd": None if not fb else fb["geomean"] >= 1.05 and fb["min"] >= 0.97,
                "bwd": None if not b else b["geomean"] >= 1.05}

    summary["ab"] = {}
    for name, b, a, keep in ab:
        for pass_ in ("bwd", "fwdbwd"):
            rs = [table[k][b] / table[k][a] for k in table if k[6] == pass_ and keep(k) and table[k].get(a)
                  and table[k].get(b)]
            if rs:
                summary["ab"][f"{name}, {pass_}"] = {"rows": len(rs), "geomean": geomean(rs), "min": min(rs),
                                                     "max": max(rs)}
                print(f"A/B {name}, {pass_}: speed ratio geomean {geomean(rs):.3f} (min {min(rs):.3f}, "
                      f"max {max(rs):.3f}, {len(rs)} rows)")

    det = [r for r in rows(out / "det.jsonl") if r.get("mode") == "determinism" and r.get("kind") != "device"]
    det_ok = [r for r in det if "slowdown" in r]
    if det_ok:
        equal = all(r.get("equal") for r in det_ok)
        worst = max(r["slowdown"] for r in det_ok)
        summary["determinism"] = {"rows": det_ok, "all_equal": equal, "runs": min(r.get("runs", 2) for r in det_ok),
                                  "worst_speed_ratio": 1 / worst,
                                  "pass": equal and 1 / worst >= 0.8}
        for r in det_ok:
            print(f"deterministic {shape_name(shape_key(r))}: equal over {r.get('runs', 2)} runs {r.get('equal')}, "
                  f"speed {1 / r['slowdown']:.3f}x default ({r.get('kernel')})")
        print(f"determinism: {'PASS' if summary['determinism']['pass'] else 'FAIL'} (worst speed ratio {1 / worst:.3f})")
    else:
        print("determinism: not measured", *[r.get("error", "") for r in det][:2])
    # The deterministic A/B runs (gpu-sm90-bwd.sh stage det): this build's order against
    # head-major (ascending ranks), and this build against each variant build, same shapes.
    det_ms = {shape_key(r): r["deterministic_ms"] for r in det_ok if "deterministic_ms" in r}
    for other in sorted(out.glob("det-*.jsonl")):
        name = other.stem[len("det-"):]
        rs = [r["deterministic_ms"] / det_ms[shape_key(r)]
              for r in rows(other) if r.get("mode") == "determinism" and "deterministic_ms" in r
              and shape_key(r) in det_ms]
        if rs:
            summary["ab"][f"deterministic: default vs {name}"] = {"rows": len(rs), "geomean": geomean(rs),
                                                                 "min": min(rs), "max": max(rs),
                                                                 "ratio": f"time {name} / default"}
            print(f"A/B deterministic, this build's default vs {name}: time ratio {name} / default geomean "
                  f"{geomean(rs):.3f} (min {min(rs):.3f}, max {max(rs):.3f}, {len(rs)} rows; > 1: {name} slower)")

    mem = sorted((r for r in rows(out / "mem.jsonl") if "tensor_bytes" in r and not r.get("kind")),
                 key=lambda r: r["sq"])
    if mem:
        per_token = [(r["sq"], (r["tensor_bytes"] + r.get("scratch_bytes", 0)) / r["sq"], r) for r in mem]
        for s, bpt, r in per_token:
            print(f"memory s{s}: tensors {r['tensor_bytes'] / 2**30:.2f} GiB + scratch {r.get('scratch_bytes', 0) / 2**30:.2f}"
                  f" GiB = {bpt:.0f} bytes/token (free drop {r.get('free_drop_bytes', 0) / 2**30:.2f} GiB, {r.get('kernel_bwd')})")
        spread = max(b for _, b, _ in per_token) / min(b for _, b, _ in per_token)
        summary["memory"] = {"rows": [{"sq": s, "bytes_per_token": b, "tensor_bytes": r["tensor_bytes"],
                                       "scratch_bytes": r.get("scratch_bytes"), "free_drop_bytes": r.get("free_drop_bytes")}
                                      for s, b, r in per_token],
                             "bytes_per_token_spread": spread, "linear": len(per_token) >= 3 and spread <= 1.10}
        print(f"memory: bytes/token spread {spread:.3f} over {len(per_token)} lengths: "
              f"{'PASS (linear)' if summary['memory']['linear'] else 'FAIL or incomplete'}")
    else:
        print("memory: not measured")
    (out / "sm90_bwd_summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
