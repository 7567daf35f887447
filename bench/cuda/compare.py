#!/usr/bin/env python3
"""Join cuda_bench's and sdpa_anchor.py's JSON lines (one job) and judge the issue-3 bars.

    python3 bench/cuda/compare.py FASTATTN.jsonl SDPA.jsonl [--results-dir DIR] [--doc DOC]

Prints fastattn's speed against each SDPA backend (anchor time / fastattn time, so > 1 means
fastattn is faster, equal to the TFLOP/s ratio: both sides count FLOPs the same way) and one
PASS / FAIL / MISSING line per bar:

  fwd_vs_flash        forward >= 1.0x SDPA flash on every paper shape with seqlen >= 2k
  fwdbwd_vs_flash     forward+backward >= 1.0x SDPA flash on every paper shape
  fwd_vs_math_8k      forward >= 10x SDPA math at seqlen 8k
  seqpar              batch 1, 16 heads, 32k: TFLOP/s within 10 % of the sweep's best at the
                      same head dim (per pass)
  splitkv_hbm         decode GB/s of K+V >= 70 % of the device-to-device copy bandwidth
                      measured in the same run
  long_memory_linear  device memory needed (tensors + scratch) grows per token from 64k to 128k
                      no faster than from 32k to 64k (ratio <= 1.5; quadratic would be 2)
  determinism         the deterministic backward is bitwise repeatable on every shape

Writes the joined result to DIR/<machine>-cuda[-short]-<date>.json (default bench/results)
and, with --doc, regenerates its block in that document (bench/render_performance.py).
Exit status 1 when a bar fails, 0 otherwise. Python 3 standard library only.
"""
import argparse
import datetime
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # bench/: render_performance, render_cuda

KEY = ("tag", "pass", "b", "sq", "sk", "h", "hkv", "d", "causal")
ANCHORS = ("flash", "cudnn", "efficient", "math")


def load(path):
    """JSON objects, one per line; other lines (warnings, tracebacks) are counted, not fatal."""
    rows, junk = [], 0
    try:
        text = pathlib.Path(path).read_text(errors="replace")
    except OSError as e:
        print(f"compare: cannot read {path}: {e}", file=sys.stderr)
        return rows
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            junk += bool(line)
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            junk += 1
    if junk:
        print(f"compare: {path}: {junk} lines that are not JSON rows were ignored", file=sys.stderr)
    return rows


def key(row):
    return tuple(row.get(k) for k in KEY)


def shape_label(c):
    s = f"b{c['b']} h{c['h']}"
    if c["hkv"] != c["h"]:
        s += f"/{c['hkv']}"
    s += f" s{c['sq']}" + (f"x{c['sk']}" if c["sk"] != c["sq"] else "")
    return s + f" d{c['d']}"


def join(fastattn_rows, sdpa_rows):
    """One comparison per fastattn timing row: its time and each anchor's, and the ratios."""
    anchors = {}
    for r in sdpa_rows:
        if r.get("backend"):
            anchors.setdefault(key(r), {})[r["backend"]] = r
    out = []
    for r in fastattn_rows:
        if r.get("kind") or r.get("mode") == "determinism":
            continue
        c = {k: r.get(k) for k in KEY}
        c.update(mode=r.get("mode"), label=shape_label(c), fastattn_ms=r.get("ms"),
                 fastattn_tflops=r.get("tflops"), kernel=r.get("kernel"), error=r.get("error"))
        c["anchors"] = {}
        c["speedup"] = {}
        for name, a in anchors.get(key(r), {}).items():
            c["anchors"][name] = {k: a.get(k) for k in ("ms", "tflops", "kv_gbs", "error", "skipped")
                                  if a.get(k) is not None}
            if a.get("ms") and r.get("ms"):
                c["speedup"][name] = a["ms"] / r["ms"]
        out.append(c)
    return out


def bar(name, description, status, measured=None, target=None, unit="x", comparison=">=",
        detail=""):
    return {"name": name, "description": description, "measured": measured, "target": target,
            "unit": unit, "comparison": comparison, "status": status, "detail": detail}


def speedup_bar(name, description, comps, anchor, target):
    if not comps:
        return bar(name, description, "MISSING", target=target, detail="no rows of this kind in the run")
    errors = [c for c in comps if c["error"]]
    if errors:
        return bar(name, description, "FAIL", target=target,
                   detail=f"{len(errors)} fastattn rows failed, e.g. {errors[0]['label']}: {errors[0]['error']}")
    measured = [c for c in comps if anchor in c["speedup"]]
    if not measured:
        return bar(name, description, "MISSING", target=target, detail=f"no SDPA {anchor} timings")
    worst = min(measured, key=lambda c: c["speedup"][anchor])
    value = worst["speedup"][anchor]
    missing = len(comps) - len(measured)
    detail = (f"worst {worst['label']} {'causal' if worst['causal'] else 'non-causal'}: "
              f"{worst['fastattn_ms']:.3f} ms vs {worst['anchors'][anchor]['ms']:.3f} ms; "
              f"best {max(c['speedup'][anchor] for c in measured):.2f}x over {len(measured)} shapes")
    if missing:
        detail += f"; {missing} shapes without an SDPA {anchor} time"
    return bar(name, description, "PASS" if value >= target else "FAIL", value, target, detail=detail)


def paper_rows(comps, pass_, min_seqlen=0):
    return [c for c in comps if c["tag"] == "paper" and c["pass"] == pass_ and c["sq"] >= min_seqlen]


def seqpar_bars(comps):
    bars = []
    for pass_ in ("fwd", "fwdbwd"):
        rows = [c for c in comps if c["tag"] == "seqpar" and c["pass"] == pass_]
        name, desc = f"seqpar_{pass_}", f"{pass_} b1 h16 s32k TFLOP/s / best paper-sweep TFLOP/s at the same d"
        if not rows:
            bars.append(bar(name, desc, "MISSING", target=90, unit="%", detail="no seqpar rows"))
            continue
        worst, details, status = None, [], "PASS"
        for c in rows:
            sweep = [p["fastattn_tflops"] for p in paper_rows(comps, pass_)
                     if p["d"] == c["d"] and p["fastattn_tflops"]]
            if c["error"] or not sweep:
                status = "FAIL" if c["error"] else "MISSING"
                details.append(f"d{c['d']}: " + (c["error"] or "no paper-sweep rows to compare with"))
                continue
            pct = 100 * c["fastattn_tflops"] / max(sweep)
            worst = pct if worst is None else min(worst, pct)
            details.append(f"d{c['d']}: {c['fastattn_tflops']:.0f} vs best {max(sweep):.0f} TFLOP/s")
            if pct < 90 and status == "PASS":
                status = "FAIL"
        bars.append(bar(name, desc, status, worst, 90, "%", detail="; ".join(details)))
    return bars


def splitkv_bar(fastattn_rows):
    desc = "decode forward (sq 1/4/16, sk 64k, h32, d128): K+V GB/s / measured copy bandwidth"
    hbm = max((r["gbs"] for r in fastattn_rows if r.get("kind") in ("hbm", "hbm_best") and r.get("gbs")),
              default=None)
    rows = [r for r in fastattn_rows if r.get("tag") == "splitkv" and not r.get("kind")]
    if not rows:
        return bar("splitkv_hbm", desc, "MISSING", target=70, unit="%", detail="no splitkv rows"), hbm
    if not hbm:
        return bar("splitkv_hbm", desc, "MISSING", target=70, unit="%",
                   detail="no copy-bandwidth measurement in the run"), hbm
    errors = [r for r in rows if r.get("error")]
    if errors:
        return bar("splitkv_hbm", desc, "FAIL", target=70, unit="%",
                   detail=f"sq={errors[0]['sq']}: {errors[0]['error']}"), hbm
    fractions = {r["sq"]: 100 * r["kv_gbs"] / hbm for r in rows}
    worst = min(fractions.values())
    detail = ", ".join(f"sq{sq}: {f:.0f} %" for sq, f in sorted(fractions.items()))
    detail += f" of {hbm:.0f} GB/s"
    return bar("splitkv_hbm", desc, "PASS" if worst >= 70 else "FAIL", worst, 70, "%", detail=detail), hbm


def needed_bytes(r):
    return r["tensor_bytes"] + max(r.get("scratch_bytes") or 0, 0)


def long_bar(fastattn_rows):
    desc = "device memory (tensors + scratch) per token, 64k->128k over 32k->64k (1 = linear)"
    rows = [r for r in fastattn_rows if r.get("tag") == "long" and not r.get("kind")]
    if not rows:
        return bar("long_memory_linear", desc, "MISSING", target=1.5, comparison="<=",
                   detail="no long rows")
    ratios, details, status = [], [], "PASS"
    for pass_ in ("fwd", "fwdbwd"):
        by_s = {r["sq"]: r for r in rows if r["pass"] == pass_}
        failed = [r for r in by_s.values() if r.get("error")]
        if failed or not all(s in by_s for s in (32768, 65536, 131072)):
            status = "FAIL"
            details.append(f"{pass_}: " + (f"s{failed[0]['sq']}: {failed[0]['error']}" if failed
                                           else "missing lengths"))
            continue
        n32, n64, n128 = (needed_bytes(by_s[s]) for s in (32768, 65536, 131072))
        ratio = ((n128 - n64) / 65536) / ((n64 - n32) / 32768) if n64 > n32 else float("inf")
        ratios.append(ratio)
        details.append(f"{pass_}: {ratio:.2f} ({n128 / 2**20:.0f} MiB at 128k, scratch "
                       f"{by_s[131072].get('scratch_bytes', 0) / 2**20:.0f} MiB)")
        if ratio > 1.5:
            status = "FAIL"
    return bar("long_memory_linear", desc, status, max(ratios) if ratios else None, 1.5, "x", "<=",
               "; ".join(details))


def determinism_bar(fastattn_rows):
    desc = "deterministic CUDA backward twice on the same inputs: dq, dk, dv bitwise equal"
    rows = [r for r in fastattn_rows if r.get("mode") == "determinism" and not r.get("kind")]
    if not rows:
        return bar("determinism", desc, "MISSING", detail="no determinism rows")
    errors = [r for r in rows if r.get("error")]
    if errors:
        return bar("determinism", desc, "FAIL", detail=f"{len(errors)} shapes failed: {errors[0]['error']}")
    equal = sum(bool(r.get("equal")) for r in rows)
    slow = ", ".join(f"{r['slowdown']:.2f}x" for r in rows if r.get("slowdown"))
    return bar("determinism", desc, "PASS" if equal == len(rows) else "FAIL", equal, len(rows),
               "shapes", detail=f"deterministic / default backward time: {slow}")


def judge(fastattn_rows, comps):
    bars = [
        speedup_bar("fwd_vs_flash", "forward time, SDPA flash / fastattn, paper shapes with seqlen >= 2k",
                    paper_rows(comps, "fwd", 2048), "flash", 1.0),
        speedup_bar("fwdbwd_vs_flash", "forward+backward time, SDPA flash / fastattn, every paper shape",
                    paper_rows(comps, "fwdbwd"), "flash", 1.0),
        speedup_bar("fwd_vs_math_8k", "forward time, SDPA math / fastattn, paper shapes at seqlen 8k",
                    [c for c in paper_rows(comps, "fwd") if c["sq"] == 8192], "math", 10.0),
    ]
    bars += seqpar_bars(comps)
    splitkv, hbm = splitkv_bar(fastattn_rows)
    bars += [splitkv, long_bar(fastattn_rows), determinism_bar(fastattn_rows)]
    for anchor in ("cudnn",):  # reported, not judged
        for pass_ in ("fwd", "fwdbwd"):
            b = speedup_bar(f"{pass_}_vs_{anchor}", f"{pass_} time, SDPA {anchor} / fastattn, every paper shape",
                            paper_rows(comps, pass_), anchor, 1.0)
            if b["status"] != "MISSING":
                b["status"] = "INFO"
            bars.append(b)
    return bars, hbm


def machine_slug(gpu):
    slug = re.sub(r"[^a-z0-9]+", "-", (gpu or "gpu").lower()).strip("-")
    return slug or "gpu"


def build_result(fastattn_rows, sdpa_rows, args):
    comps = join(fastattn_rows, sdpa_rows)
    bars, hbm = judge(fastattn_rows, comps)
    devices = [r for r in fastattn_rows if r.get("kind") == "device"]
    sdpa_device = next((r for r in sdpa_rows if r.get("kind") == "device"), {})
    gemm = next((r["tflops"] for r in sdpa_rows if r.get("kind") == "gemm_peak" and r.get("tflops")), None)
    gpu = (devices[0].get("gpu") if devices else None) or sdpa_device.get("gpu")
    modes = sorted({r.get("mode") for r in devices if r.get("mode")})
    stamp = min((r.get("timestamp_utc", "") for r in devices), default="") or \
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "kind": "cuda_bench",
        "machine": machine_slug(gpu),
        "sweep": "paper" if "paper" in modes else "short",
        "context": {"timestamp_utc": stamp, "gpu": gpu, "fastattn_device": devices[0] if devices else {},
                    "sdpa_device": sdpa_device, "modes": modes, "gemm_peak_tflops": gemm,
                    "copy_bandwidth_gbs": hbm, "inputs": [str(p) for p in (args.fastattn, args.sdpa)]},
        "bars": bars,
        "comparisons": comps,
        # splitkv_nosplit: the same rows with FASTATTN_CUDA_NUM_SPLITS=1 (run_device.sh), shown
        # beside the default for the split's gain; the bar judges the default only.
        "splitkv": [r for r in fastattn_rows
                    if r.get("tag") in ("splitkv", "splitkv_nosplit") and not r.get("kind")],
        "long": [r for r in fastattn_rows if r.get("tag") == "long" and not r.get("kind")],
        "determinism": [r for r in fastattn_rows if r.get("mode") == "determinism" and not r.get("kind")],
        "raw": {"fastattn": fastattn_rows, "sdpa": sdpa_rows},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("fastattn", type=pathlib.Path, help="cuda_bench JSON lines (modes concatenated)")
    p.add_argument("sdpa", type=pathlib.Path, help="sdpa_anchor.py JSON lines")
    p.add_argument("--results-dir", type=pathlib.Path, default=ROOT / "bench" / "results")
    p.add_argument("--doc", type=pathlib.Path, help="regenerate this document's CUDA block "
                   "(e.g. docs/performance.md)")
    args = p.parse_args()
    fastattn_rows = load(args.fastattn)
    for r in fastattn_rows:
        if r.get("kind") == "fatal":
            print(f"compare: cuda_bench {r.get('mode')} stopped: {r.get('error')}")
    result = build_result(fastattn_rows, load(args.sdpa), args)

    from render_cuda import render_cuda_bench  # noqa: E402  (bench/ on sys.path above)
    print(render_cuda_bench(result))
    for b in result["bars"]:
        print(f"{b['status']:7} {b['name']}: {b['detail']}")

    date = result["context"]["timestamp_utc"][:10]
    suffix = "" if result["sweep"] == "paper" else "-short"
    path = args.results_dir / f"{result['machine']}-cuda{suffix}-{date}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    if args.doc:
        import render_performance

        args.doc.write_text(render_performance.update(args.doc.read_text(), result))
        print(f"updated {args.doc}")
    return 1 if any(b["status"] == "FAIL" for b in result["bars"]) else 0


if __name__ == "__main__":
    sys.exit(main())
