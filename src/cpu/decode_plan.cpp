// decode_plan.cpp — when the CPU decode kernel runs and how it cuts the work (cpu_backend.hpp).
#include <string>

#include "common/environment.hpp"
#include "cpu/cpu_backend.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cpu {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// FASTATTN_CPU_DECODE: auto (default: seqlen_q <= kDecodeMaxQueries), on, off.
bool decode_wanted(const AttentionProblem& p) {
  const char* env = env_value(EnvVar::cpu_decode);
  const std::string mode = env ? env : "";
  if (mode.empty() || mode == "auto") return p.seqlen_q <= kDecodeMaxQueries;
  if (mode == "on") return true;
  if (mode == "off") return false;
  throw Error(ErrorCode::invalid_argument, "FASTATTN_CPU_DECODE: expected auto, on or off, got '" + mode + "'");
}

// FASTATTN_CPU_DECODE_SPLITS: a positive split count, for tests; 0 when unset.
std::int64_t forced_splits() { return env_integer(EnvVar::cpu_decode_splits, 1, 4096, 0); }

// THE choice of the inner products (DecodeForm, cpu_backend.hpp), with its reason: AMX tiles
// when a KV head packs enough rows to fill them (bf16, head_dim % 32 == 0, AMX allowed by
// FASTATTN_CPU_AMX and present); else, for bf16, K and V read in place: both products on
// vdpbf16ps on every AVX-512 BF16 CPU (bf16_dot), widened in registers with f32 FMAs on AVX-512
// without the extension (bf16_widened); else f32 FMAs on staged tiles. Unlike the prefill's pair
// kernel, which must beat the FMA by kBf16DotMinRatio, the decode form does not depend on
// vdpbf16ps's rate: it ran 1.65x faster than the widened form on AMD Zen 4 (vdpbf16ps at 2x the
// FMA's rate) and 1.48-1.58x on Sapphire Rapids (at 0.5x), where its spread prefetches let the
// reads overlap the compute (docs/inference-cpu-decode.md). FASTATTN_CPU_BF16_DOT, when set, picks among
// the vector forms: off takes the f32 tiles, native the vdpbf16ps form (AVX-512 BF16), emulated
// the widened form on AVX-512 and, under AVX2, the bf16-pair form (test paths). Unlike the
// prefill's, it does not turn AMX off: shapes the AMX form takes keep it unless
// FASTATTN_CPU_AMX=off.
struct FormChoice {
  DecodeForm form = DecodeForm::f32_tiles;
  amx::AmxMode amx = amx::AmxMode::off;
  std::string reason;
};

FormChoice decode_form_choice(const AttentionProblem& p, Isa isa, std::int64_t rows_per_head) {
  FormChoice c;
  if (p.dtype != DType::bf16) {
    c.reason = "f32 FMA dot products, K/V tiles converted in L1";
    return c;
  }
  const bool avx512 = isa == Isa::avx512 || isa == Isa::avx512bf16 || isa == Isa::amx;
  // The bf16 forms without AMX, and why (env: FASTATTN_CPU_BF16_DOT, read once here).
  const char* env = env_value(EnvVar::cpu_bf16_dot);
  const bool from_env = env != nullptr && *env != '\0';  // set and not empty, as forward_bf16_dot reads it
  // Set: forward_bf16_dot validates it (throws on a bad value, or on native without AVX-512
  // BF16). Unset: the form does not depend on vdpbf16ps's measured rate (the prefill's rule).
  const Bf16Dot dot = from_env ? forward_bf16_dot(isa, p.dtype) : Bf16Dot::off;
  const bool has_dot = isa == Isa::avx512bf16 || isa == Isa::amx;
  DecodeForm vector_form = DecodeForm::f32_tiles;
  std::string vector_reason;
  if (from_env && dot == Bf16Dot::off) {
    vector_reason = std::string("f32 FMA dot products, K/V tiles converted in L1 (FASTATTN_CPU_BF16_DOT=") + env + ")";
  } else if (avx512 && (from_env ? dot == Bf16Dot::native : has_dot)) {
    vector_form = DecodeForm::bf16_dot;
    vector_reason = std::string("bf16 K and V read in place; q.k and P V (P rounded to bf16) on bf16 pairs "
                                "(vdpbf16ps)") +
                    (from_env ? " (FASTATTN_CPU_BF16_DOT=native)" : "");
  } else if (avx512) {
    vector_form = DecodeForm::bf16_widened;
    vector_reason = std::string("bf16 K and V read in place, widened in registers, f32 FMAs for q.k and P V") +
                    (from_env ? " (FASTATTN_CPU_BF16_DOT=emulated: the FMA form)" : " (no AVX-512 BF16)");
  } else if (from_env && dot == Bf16Dot::emulated) {
    vector_form = DecodeForm::bf16_pairs;
    vector_reason = "q.k on bf16 pairs, dot product emulated (FASTATTN_CPU_BF16_DOT=emulated under AVX2: a test path)";
  } else {
    vector_reason = "f32 FMA dot products, K/V tiles converted in L1 (AVX2: no widened form)";
  }
  const amx::AmxMode mode = amx::amx_mode();  // throws on a bad FASTATTN_CPU_AMX
  std::string why_not;
  if (mode == amx::AmxMode::off) {
    why_not = amx::amx_mode_from_environment() ? "FASTATTN_CPU_AMX=off" : "no AMX here";
  } else if (p.head_dim % 32 != 0) {
    why_not = "head_dim " + std::to_string(p.head_dim) + " not a multiple of 32";
  } else if (mode == amx::AmxMode::emulated && isa == Isa::avx2) {
    why_not = "no emulated AMX decode under AVX2";
  } else if (mode == amx::AmxMode::native && isa != Isa::amx) {
    why_not = std::string("ISA ") + to_string(isa) + " (FASTATTN_CPU_ISA)";
  } else if (rows_per_head < kDecodeAmxMinRows && !amx::amx_mode_from_environment()) {
    why_not = std::to_string(rows_per_head) + " rows per KV head < " + std::to_string(kDecodeAmxMinRows) +
              " (a 16-row tile would be mostly padding)";
  } else {
    c.form = DecodeForm::amx;
    c.amx = mode;
    c.reason = std::to_string(rows_per_head) + " rows per KV head: both products on AMX tiles" +
               (mode == amx::AmxMode::emulated ? " (emulated, FASTATTN_CPU_AMX=emulated: a test path)" : "");
    return c;
  }
  c.form = vector_form;
  c.reason = vector_reason + "; no AMX: " + why_not;
  return c;
}

}  // namespace

DecodePlan decode_plan(const AttentionProblem& p, Isa isa, int threads) {
  DecodePlan plan;
  if (!decode_wanted(p)) return plan;
  plan.use = true;
  plan.threads = threads > 0 ? threads : 1;
  const std::int64_t group = p.group_size();
  const FormChoice form = decode_form_choice(p, isa, group * p.seqlen_q);
  plan.form = form.form;
  plan.amx = form.amx;
  const std::int64_t all_rows = group * p.seqlen_q;
  plan.rows = all_rows < kDecodeMaxRows ? (all_rows > 0 ? all_rows : 1) : kDecodeMaxRows;
  plan.row_chunks = ceil_div(all_rows > 0 ? all_rows : 1, plan.rows);
  // Keys per tile: the staged f32 K and V tiles (2 * block_k * head_dim floats) fit in 32 KiB
  // of L1, 16..128 keys, a multiple of 16 (one AVX-512 vector of scores).
  const std::int64_t padded_dim = ceil_div(p.head_dim, 32) * 32;
  std::int64_t bk = 32768 / (2 * padded_dim * 4) / 16 * 16;
  plan.block_k = bk < 16 ? 16 : (bk > kDecodeMaxBlockK ? kDecodeMaxBlockK : bk);
  if (plan.amx != amx::AmxMode::off) plan.block_k = (plan.block_k + 31) / 32 * 32;  // whole 32-key k-steps
  // KV heads per unit: as many as keep their Q and O (2 * rows * padded_dim f32 each) within
  // kDecodeUnitStateBytes of L2; their K/V tiles are then one contiguous read.
  const std::int64_t head_state = 2 * plan.rows * padded_dim * 4;
  std::int64_t heads = kDecodeUnitStateBytes / head_state;
  heads = heads < 1 ? 1 : (heads > p.num_kv_heads ? p.num_kv_heads : heads);
  plan.head_blocks = p.num_kv_heads > 0 ? ceil_div(p.num_kv_heads, heads) : 0;
  plan.heads_per_unit = plan.head_blocks > 0 ? ceil_div(p.num_kv_heads, plan.head_blocks) : 1;  // even blocks
  // Splits: enough units for kDecodeUnitsPerThread per thread, each of >= kDecodeMinSplitKeys keys.
  const std::int64_t base_units = p.batch * plan.head_blocks * plan.row_chunks;
  const std::int64_t forced = forced_splits();
  std::int64_t splits = forced;
  if (forced == 0) {
    splits = base_units > 0 ? ceil_div(std::int64_t{kDecodeUnitsPerThread} * plan.threads, base_units) : 1;
    const std::int64_t by_keys = ceil_div(p.seqlen_k, kDecodeMinSplitKeys);
    if (splits > by_keys) splits = by_keys;
    if (splits > kDecodeMaxSplits) splits = kDecodeMaxSplits;
    if (splits < 1) splits = 1;
  }
  plan.splits = splits;
  const std::string env_mode = env_value(EnvVar::cpu_decode) ? env_value(EnvVar::cpu_decode) : "";
  plan.reason = (env_mode == "on" ? std::string("decode forced by FASTATTN_CPU_DECODE=on")
                                  : "decode: seqlen_q " + std::to_string(p.seqlen_q) + " <= " +
                                        std::to_string(kDecodeMaxQueries)) +
                "; " + std::to_string(group) + " query heads x " + std::to_string(p.seqlen_q) +
                " tokens packed per KV head (" + std::to_string(plan.rows) + " rows per unit, " +
                std::to_string(plan.row_chunks) + " row chunk" + (plan.row_chunks > 1 ? "s" : "") +
                "), " +
                std::to_string(plan.heads_per_unit) + " KV heads per unit read together, K/V once per unit in their dtype; " + std::to_string(splits) + " key split" +
                (splits > 1 ? "s" : "") + " per (batch, KV head block)" +
                (forced ? " (FASTATTN_CPU_DECODE_SPLITS)" : " for " + std::to_string(plan.threads) + " threads") +
                ", merged exactly (merge_weights)";
  plan.reason += "; " + form.reason;
  return plan;
}

DecodeGeometry decode_geometry(const AttentionProblem& p, const DecodePlan& plan) {
  // AMX: state rows per head rounded up to whole 16-row tiles.
  const std::int64_t rows = plan.amx != amx::AmxMode::off ? ceil_div(plan.rows, 16) * 16 : plan.rows;
  return DecodeGeometry(p.head_dim, rows, plan.heads_per_unit, plan.block_k);
}

DecodeScratchSize decode_scratch_size(const AttentionProblem& p, const DecodePlan& plan) {
  const DecodeGeometry g = decode_geometry(p, plan);
  const std::int64_t units = p.batch * plan.head_blocks * plan.row_chunks * plan.splits;
  const auto part_rows = static_cast<std::size_t>(units * plan.heads_per_unit * g.rows);
  DecodeScratchSize s;
  s.parts_bytes = part_rows * static_cast<std::size_t>(g.dp + 1) * sizeof(float);
  s.thread_bytes = (g.scratch_floats() * sizeof(float) + 63) / 64 * 64;
  return s;
}

}  // namespace fastattn::cpu
