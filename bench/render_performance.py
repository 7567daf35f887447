#!/usr/bin/env python3
"""Render benchmark JSON (bench_cpu, server_cpu.py or bench/cuda/compare.py) into docs/performance.md.

    bench/render_performance.py RESULT.json [RESULT.json ...] [--doc docs/performance.md]

Each result becomes one block between `<!-- result:<id>:begin -->` and `<!-- result:<id>:end -->`
inside the `<!-- results:begin -->` ... `<!-- results:end -->` region of the document, where
<id> is the result's kind and machine. A newer run of the same kind on the same machine replaces
its block; other blocks are kept. Quick runs are refused (their numbers are not measurements of
the bars). Python 3 standard library only.
"""
import argparse
import json
import math
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_BEGIN = "<!-- results:begin -->"
RESULTS_END = "<!-- results:end -->"


def fmt(value, digits=1, unit=""):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}{unit}"


def table(headers, rows, right=()):
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def context_lines(result):
    ctx = result.get("context", {})
    cpu = ctx.get("cpu", {})
    build = ctx.get("build", {})
    command = " ".join(ctx.get("command", []))
    lines = [
        f"- Date (UTC): {ctx.get('timestamp_utc', '?')}",
        f"- CPU: {cpu.get('model', '?')} ({cpu.get('logical_cpus', '?')} logical CPUs; "
        f"features: {', '.join(cpu.get('features', [])) or 'none'})",
        f"- fastattn {build.get('version', '?')}, CPU kernels {', '.join(build.get('cpu_isas_compiled', []))}, "
        f"selected ISA {build.get('cpu_isa_selected', '?')}",
        f"- Command: `{command}`",
    ]
    start, end = result.get("load_average_1min_at_start"), ctx.get("load_average_1min")
    if start is not None or end is not None:
        lines.append(f"- Load average (1 min) at start / end of the run: {fmt(start, 2)} / {fmt(end, 2)} "
                     f"on {cpu.get('logical_cpus', '?')} logical CPUs")
    return lines


def peaks_line(peaks):
    parts = [
        f"fp32 FMA AVX2 {fmt(peaks.get('fp32_fma_avx2_gflops'))} GFLOP/s",
        "fp32 FMA AVX-512 " + (f"{fmt(peaks['fp32_fma_avx512_gflops'])} GFLOP/s"
                                if peaks.get("fp32_fma_avx512_gflops") is not None else "n/a on this CPU"),
        "BF16 dot " + (f"{fmt(peaks['bf16_dot_gflops'])} GFLOP/s"
                       if peaks.get("bf16_dot_gflops") is not None else "n/a on this CPU"),
        f"memory read {fmt(peaks.get('mem_read_gbs'))} GB/s",
    ]
    return (f"- Peaks measured in the same run on {peaks.get('threads', '?')} threads "
            f"(best of before and after the runs): " + "; ".join(parts))


def render_bench_cpu(result):
    out = [f"### bench_cpu on {result['machine']}, {result.get('threads', '?')} threads", ""]
    out += context_lines(result)
    out.append(peaks_line(result.get("peaks", {})))
    out.append("")
    bars = result.get("bars", [])
    if bars:
        rows = []
        for b in bars:
            unit = b.get("unit", "")
            target = "-" if b.get("target") is None else f"{b.get('comparison', '>=')} {b['target']:g} {unit}"
            rows.append([b["name"], b["description"], fmt(b.get("measured"), 2, " " + unit), target,
                         f"**{b['status']}**", b.get("detail", "")])
        out += [table(["bar", "what", "measured", "target", "result", "detail"], rows, right=(2, 3)), ""]
    runs = result.get("runs", [])
    if runs:
        rows = []
        for r in runs:
            s = r["shape"]
            mask = "causal" if s.get("causal") else "none"
            rows.append([r.get("impl", "fastattn"), s["label"], mask, r["pass"],
                         fmt(r["median_s"] * 1e3, 2), fmt(r["gflops"]), fmt(r.get("percent_of_peak")),
                         fmt(r.get("peak_extra_bytes", 0) / 2**20), r["kernel"]["kernel"]])
        out += ["All runs (median of at least "
                f"{result.get('config', {}).get('min_repeats', '?')} timed calls; "
                "+peak MiB: growth of the process's peak RSS during the run, a lower bound "
                "when freed memory is reused):", "",
                table(["impl", "shape", "mask", "pass", "time (ms)", "GFLOP/s", "% peak",
                       "+peak MiB", "kernel"], rows, right=(4, 5, 6, 7)), ""]
    memory = result.get("memory") or {}
    points = memory.get("points", [])
    if points:
        rows = []
        for p in points:
            def mib(key):
                return fmt(p[key] / 2**20) if isinstance(p.get(key), (int, float)) else "-"
            rows.append([p.get("impl", "?"), p.get("seqlen", "?"), mib("tensor_bytes"),
                         mib("peak_forward"), mib("peak_backward"), p.get("error", "")])
        shape = memory.get("shape", {})
        out += [f"Peak resident memory of the whole process, one process per row "
                f"(b{shape.get('batch')} h{shape.get('heads')} d{shape.get('head_dim')} "
                f"{shape.get('dtype')} {'causal' if shape.get('causal') else 'none'}):", "",
                table(["impl", "seqlen", "tensors MiB", "peak fwd MiB", "peak bwd MiB", "note"],
                      rows, right=(1, 2, 3, 4)), ""]
    return "\n".join(out)


def render_server_cpu(result):
    ctx = result.get("context", {})
    out = [f"### server_cpu on {result['machine']}, {result.get('threads', '?')} threads", ""]
    out += [f"- Date (UTC): {ctx.get('timestamp_utc', '?')}",
            f"- CPU: {ctx.get('cpu_model', '?')}; PyTorch {ctx.get('torch_version', '?')} "
            f"(CPU capability {ctx.get('torch_cpu_capability', '?')}); fastattn "
            f"{ctx.get('fastattn_version', '?')}",
            f"- Command: `{ctx.get('command', '?')}`"]
    if ctx.get("load_average_1min") is not None:
        out.append(f"- Load average (1 min) at start / end of the run: "
                   f"{fmt(ctx.get('load_average_1min_at_start'), 2)} / {fmt(ctx['load_average_1min'], 2)}")
    if result.get("peaks"):
        out.append(peaks_line(result["peaks"]))
    out.append("")
    rows = []
    for c in result.get("comparisons", []):
        rows.append([c["shape"], c["dtype"], c["mask"], c["pass"],
                     fmt(c.get("fastattn_ms"), 2), fmt(c.get("torch_ms"), 2),
                     fmt(c.get("fastattn_gflops")), fmt(c.get("torch_gflops")),
                     fmt(c.get("speedup"), 2, "x")])
    out += [table(["shape", "dtype", "mask", "pass", "fastattn ms", "torch ms", "fastattn GFLOP/s",
                   "torch GFLOP/s", "torch time / fastattn time"], rows, right=(4, 5, 6, 7, 8)), ""]
    if result.get("notes"):
        out += [f"- {n}" for n in result["notes"]] + [""]
    return "\n".join(out)


def block_id(result):
    return f"{result['kind']}:{result['machine']}"


def render(result):
    if result.get("kind") == "bench_cpu":
        return render_bench_cpu(result)
    if result.get("kind") == "server_cpu":
        return render_server_cpu(result)
    if result.get("kind") == "cuda_bench":
        from render_cuda import render_cuda_bench  # imported late: it imports this module

        return render_cuda_bench(result)
    raise SystemExit(f"render_performance: unknown result kind {result.get('kind')!r}")


def update(doc_text, result):
    bid = block_id(result)
    begin, end = f"<!-- result:{bid}:begin -->", f"<!-- result:{bid}:end -->"
    block = f"{begin}\n{render(result)}\n{end}"
    if RESULTS_BEGIN not in doc_text or RESULTS_END not in doc_text:
        raise SystemExit(f"render_performance: the document lacks {RESULTS_BEGIN} / {RESULTS_END}")
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(doc_text):
        return pattern.sub(lambda _: block, doc_text)
    head, rest = doc_text.split(RESULTS_BEGIN, 1)
    middle, tail = rest.split(RESULTS_END, 1)
    middle = re.sub(r"\n_No results recorded yet\._\n", "\n", middle)
    return f"{head}{RESULTS_BEGIN}{middle.rstrip()}\n\n{block}\n\n{RESULTS_END}{tail}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=pathlib.Path)
    parser.add_argument("--doc", type=pathlib.Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--print", action="store_true", help="print the blocks, do not write the doc")
    args = parser.parse_args()
    text = args.doc.read_text() if not args.print else ""
    for path in args.results:
        result = json.loads(path.read_text())
        if result.get("quick"):
            print(f"render_performance: {path} is a --quick run; not rendered", file=sys.stderr)
            continue
        if "machine" not in result:
            raise SystemExit(f"render_performance: {path} has no 'machine'")
        if args.print:
            print(render(result))
        else:
            text = update(text, result)
    if not args.print:
        args.doc.write_text(text)
        print(f"updated {args.doc}")


if __name__ == "__main__":
    main()
