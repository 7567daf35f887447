#!/usr/bin/env python3
"""Render benchmark JSON (bench_cpu, server_cpu.py, bench/cuda/compare.py and the CUDA jobs' results) into docs/performance.md.

    bench/render_performance.py RESULT.json [RESULT.json ...] [--doc docs/performance.md]
        [--readme README.md]

The maintainer command tools/scripts/update-docs.sh calls it with the newest result of each
kind and machine in bench/results/, for both documents at once.

Each result becomes one block between `<!-- result:<id>:begin -->` and `<!-- result:<id>:end -->`
inside the `<!-- results:begin -->` ... `<!-- results:end -->` region of the document, where
<id> is the result's kind and machine. A newer run of the same kind on the same machine replaces
its block; other blocks are kept. Quick runs are refused (their numbers are not measurements of
the bars). With --readme, the README's performance table (between `<!-- readme-performance:begin -->`
and `<!-- readme-performance:end -->`) is regenerated from the same results, so the two documents
cannot disagree. Python 3 standard library only.
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
README_BEGIN = "<!-- readme-performance:begin -->"
README_END = "<!-- readme-performance:end -->"


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


def render_server_cpu_issue19(result):
    """bench/server_cpu.py --suite issue19: the issue-19 bar shapes, fastattn beside PyTorch's CPU
    SDPA in one process, each row with its bar."""
    ctx = result.get("context", {})
    out = [f"### Issue-19 suite (AMX, decode) on {result['machine']}, {result.get('threads', '?')} threads", ""]
    out += [f"- Date (UTC): {ctx.get('timestamp_utc', '?')}",
            f"- CPU: {ctx.get('cpu_model', '?')}; PyTorch {ctx.get('torch_version', '?')}; fastattn "
            f"{ctx.get('fastattn_version', '?')} (ISA {ctx.get('fastattn_isa', '?')})",
            f"- Command: `{ctx.get('command', '?')}`",
            f"- Memory read bandwidth (fastattn's peak, best over the run): {fmt(result.get('mem_read_gbs'))} GB/s",
            ""]
    rows = []
    for r in result.get("rows", []):
        bars = r.get("bars", {})
        bar = ", ".join(([f">= {bars['ratio']}x torch"] if "ratio" in bars else []) +
                        ([f">= {100 * bars['read']:.0f}% read"] if "read" in bars else [])) or "(report)"
        result_text = "-" if not bars else ("PASS" if r.get("bar_pass") else "FAIL")
        rr = r.get("ratio_rounds") or []
        ratio = fmt(r.get("ratio"), 2, "x") + (f" ({min(rr):.2f}–{max(rr):.2f})" if len(rr) > 1 else "")
        rows.append([r["name"], r["shape"], r["dtype"], r["mask"], r["pass"], fmt(r.get("fastattn_ms"), 3),
                     fmt(r.get("torch_ms"), 3), ratio, bar, result_text,
                     f"`{r.get('fastattn_kernel', '')}`"])
    out += [table(["row", "shape", "dtype", "mask", "pass", "fastattn ms", "torch ms",
                   "torch time / fastattn time (range over rounds)", "bar", "result", "fastattn kernel"], rows,
                  right=(5, 6, 7)), ""]
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
    if result.get("kind") == "server_cpu_issue19":
        return render_server_cpu_issue19(result)
    if result.get("kind") == "cuda_decode":
        from render_decode import render_cuda_decode

        return render_cuda_decode(result)
    if result.get("kind") == "cuda_sm90_forward":
        from render_sm90 import render_cuda_sm90_forward

        return render_cuda_sm90_forward(result)
    if result.get("kind") in ("cuda_sm90_sweep", "cuda_sm90_backward"):
        import render_sm90_sweeps

        return getattr(render_sm90_sweeps, "render_" + result["kind"])(result)
    if result.get("kind") == "cuda_kv_decode":
        from render_kv_decode import render_cuda_kv_decode

        return render_cuda_kv_decode(result)
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


# ---- the README's table: a few headline rows of each result, anchors from the same run ------
def _cpu_run(result, impl, label, causal, pass_):
    for r in result.get("runs", []):
        s = r["shape"]
        if (r.get("impl", "fastattn") == impl and s["label"] == label and bool(s.get("causal")) == causal
                and r["pass"] == pass_):
            return r
    return None


def readme_rows_bench_cpu(result):
    where = f"{result.get('context', {}).get('cpu', {}).get('model', result['machine'])}, {result.get('threads', '?')}"
    label = "b1 h8 s2048 d128 f32"
    rows = []
    for pass_, name in (("fwd", "forward b1 h8 s2048 d128"), ("bwd", "backward, same shape")):
        r, base = _cpu_run(result, "fastattn", label, False, pass_), _cpu_run(result, "standard", label, False, pass_)
        if not r:
            continue
        peak = r.get("peak", {}).get("gflops")
        pct = f" ({fmt(r.get('percent_of_peak'), 0)} % of the {fmt(peak)} FMA peak)" if peak else ""
        rows.append([name, where, f"{fmt(r['gflops'])} GFLOP/s{pct}",
                     f"standard attention (OpenBLAS): {fmt(base['gflops'])} GFLOP/s" if base else ""])
    full, causal = _cpu_run(result, "fastattn", label, False, "fwd"), _cpu_run(result, "fastattn", label, True, "fwd")
    if full and causal:
        rows.append(["forward, same shape, causal", where,
                     f"{fmt(full['median_s'] / causal['median_s'], 2)}x faster than non-causal", ""])
    return rows


def readme_rows_server_cpu(result):
    where = f"{result.get('context', {}).get('cpu_model', result['machine'])}, {result.get('threads', '?')}"
    rows = []
    for dtype, pass_, name in (("f32", "fwd", "forward b1 h8 s2048 d128"), ("f32", "fwd+bwd", "fwd+bwd, same shape"),
                               ("bf16", "fwd", "forward bf16, same shape")):
        c = next((c for c in result.get("comparisons", []) if c["shape"] == "b1 h8 s2048 d128"
                  and c["dtype"] == dtype and c["mask"] == "none" and c["pass"] == pass_), None)
        if c:
            rows.append([name, where, f"{fmt(c.get('fastattn_gflops'), 0)} GFLOP/s",
                         f"PyTorch CPU flash: {fmt(c.get('torch_gflops'), 0)} GFLOP/s"])
    return rows


def readme_rows_cuda_bench(result, sm90_forward_newer=False):
    """With a newer sm90 forward result on the same machine (its rows come first), the forward row
    is left out (the forward no longer runs the kernels measured here) and the fwd+bwd row says which
    kernels it measured."""
    where = result.get("context", {}).get("gpu") or result["machine"]
    rows = []
    date = result.get("context", {}).get("timestamp_utc", "?")[:10]
    passes = ((("fwdbwd", f"CUDA fwd+bwd bf16 b2 h16 s8192 d128, sm80 forward and backward ({date})"),)
              if sm90_forward_newer else
              (("fwd", "CUDA forward bf16 b2 h16 s8192 d128"), ("fwdbwd", "CUDA fwd+bwd, same shape")))
    for pass_, name in passes:
        c = next((c for c in result.get("comparisons", []) if c["tag"] == "paper" and c["pass"] == pass_
                  and c["b"] == 2 and c["sq"] == 8192 and c["d"] == 128 and not c["causal"]), None)
        if not c or c.get("error"):
            continue
        anchors = ", ".join(f"{n} {fmt(c['anchors'][a]['tflops'], 0)}" for a, n in
                            (("flash", "PyTorch SDPA flash"), ("cudnn", "cuDNN"))
                            if "tflops" in c["anchors"].get(a, {}))
        rows.append([name, where, f"{fmt(c['fastattn_tflops'], 0)} TFLOP/s",
                     f"{anchors} TFLOP/s" if anchors else ""])
    return rows


def _readme_rows_sm90(result):
    from render_sm90 import readme_rows_cuda_sm90_forward

    return readme_rows_cuda_sm90_forward(result)


def _readme_rows_kv_decode(result):
    from render_kv_decode import readme_rows_cuda_kv_decode

    return readme_rows_cuda_kv_decode(result)


README_ROWS = {"bench_cpu": readme_rows_bench_cpu, "server_cpu": readme_rows_server_cpu,
               "cuda_sm90_forward": _readme_rows_sm90, "cuda_bench": readme_rows_cuda_bench,
               "cuda_kv_decode": _readme_rows_kv_decode}


def _stamp(result):
    return result.get("context", {}).get("timestamp_utc", "")


def readme_table(results):
    rows, dates = [], []
    order = {"bench_cpu": 0, "server_cpu": 1, "cuda_sm90_forward": 2, "cuda_bench": 3, "cuda_kv_decode": 4}
    sm90 = {r.get("machine"): _stamp(r) for r in results if r.get("kind") == "cuda_sm90_forward"}

    # CPU rows first (by kind, then machine), then each GPU machine's rows together.
    def place(r):
        gpu = r.get("kind", "").startswith("cuda")
        return (r.get("machine", "") if gpu else "", order.get(r.get("kind"), 9), r.get("machine", ""))

    for result in sorted(results, key=place):
        if result.get("kind") not in README_ROWS:
            continue
        if result["kind"] == "cuda_bench":
            rows += readme_rows_cuda_bench(result, sm90.get(result.get("machine"), "") > _stamp(result))
        else:
            rows += README_ROWS[result["kind"]](result)
        dates.append(f"{result['kind']} {result['machine']} {result.get('context', {}).get('timestamp_utc', '?')[:10]}")
    intro = ("Generated by `tools/scripts/update-docs.sh` from the same JSON as docs/performance.md "
             f"({'; '.join(dates)}); each anchor ran in the same job as fastattn.")
    return intro + "\n\n" + table(["shape (f32 unless noted)", "machine, threads", "fastattn", "anchor, same run"],
                                    rows, right=(2,))


def update_readme(text, results):
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit(f"render_performance: the README lacks {README_BEGIN} / {README_END}")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_BEGIN}\n{readme_table(results)}\n{README_END}{tail}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=pathlib.Path)
    parser.add_argument("--doc", type=pathlib.Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--print", action="store_true", help="print the blocks, do not write the doc")
    parser.add_argument("--readme", type=pathlib.Path, help="also regenerate this README's performance table")
    args = parser.parse_args()
    text = args.doc.read_text() if not args.print else ""
    rendered = []
    for path in args.results:
        result = json.loads(path.read_text())
        if result.get("quick"):
            print(f"render_performance: {path} is a --quick run; not rendered", file=sys.stderr)
            continue
        if "machine" not in result:
            raise SystemExit(f"render_performance: {path} has no 'machine'")
        rendered.append(result)
        if args.print:
            print(render(result))
        else:
            text = update(text, result)
    if not args.print:
        args.doc.write_text(text)
        print(f"updated {args.doc}")
    if args.readme:
        if args.print:
            print(readme_table(rendered))
        else:
            args.readme.write_text(update_readme(args.readme.read_text(), rendered))
            print(f"updated {args.readme}")


if __name__ == "__main__":
    main()
