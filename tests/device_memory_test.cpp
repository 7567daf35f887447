// device_memory_test.cpp — memory-capped mode on any machine (fastattn/memory.hpp): the size
// parser, the need arithmetic, the message text, where the limit comes from, and that the CPU
// backends ignore the limit. The CUDA calls themselves are in gpu_memory_cap_test.cpp.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "api/device_memory.hpp"
#include "harness/harness.hpp"
#include "harness/tensors.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

constexpr std::size_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;

// set_device_memory_limit is process-wide: back to the environment's after each test.
class DeviceMemory : public ::testing::Test {
 protected:
  void TearDown() override { set_device_memory_limit(std::nullopt); }
};

TEST_F(DeviceMemory, ParsesBytesAndUnits) {
  EXPECT_EQ(parse_memory_size("17179869184"), 16 * GiB);
  EXPECT_EQ(parse_memory_size("0"), 0u);
  EXPECT_EQ(parse_memory_size("100b"), 100u);
  EXPECT_EQ(parse_memory_size("1K"), KiB);
  EXPECT_EQ(parse_memory_size("1KB"), 1000u);
  EXPECT_EQ(parse_memory_size("512M"), 512 * MiB);
  EXPECT_EQ(parse_memory_size("16G"), 16 * GiB);
  EXPECT_EQ(parse_memory_size("16Gi"), 16 * GiB);
  EXPECT_EQ(parse_memory_size("32GiB"), 32 * GiB);
  EXPECT_EQ(parse_memory_size(" 16 gib "), 16 * GiB);
  EXPECT_EQ(parse_memory_size("16GB"), 16000000000u);
  EXPECT_EQ(parse_memory_size("1.5GB"), 1500000000u);
  EXPECT_EQ(parse_memory_size("1.5G"), GiB + GiB / 2);
  EXPECT_EQ(parse_memory_size("2T"), 2 * TiB);
  EXPECT_EQ(parse_memory_size(".5K"), 512u);
}

TEST_F(DeviceMemory, RejectsBadSizesNamingTheArgument) {
  for (const char* text : {"", " ", "abc", "-1", "16X", "16GG", "1e9", "G", ".", "16 G B", "1.2.3",
                           "99999999999999999999", "20000000T"}) {
    expect_error([&] { parse_memory_size(text, kDeviceMemoryLimitEnv); }, ErrorCode::invalid_argument,
                 std::string("FASTATTN_DEVICE_MEMORY_LIMIT: expected bytes or a size with a unit (e.g. "
                             "17179869184, 16G, 32GiB, 1.5GB; ") );
    expect_error([&] { parse_memory_size(text, kDeviceMemoryLimitEnv); }, ErrorCode::invalid_argument,
                 std::string("got '") + text + "'");
  }
}

TEST_F(DeviceMemory, FormatsBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(16 * GiB), "16 GiB");
  EXPECT_EQ(format_bytes(18 * GiB + 3 * GiB / 10), "18.3 GiB");
  EXPECT_EQ(format_bytes(3 * TiB), "3 TiB");
}

// A problem with B = 2, H = 4, HKV = 2, D = 16, f16: q-like tensors 2 * 5 * 4 * 16 * 2 = 1280
// bytes (total_q 10), k-like 2 * 7 * 2 * 16 * 2 = 896 bytes (total_k 14), lse 4 * 10 * 4 = 160.
AttentionProblem small_problem() {
  AttentionProblem p;
  p.dtype = DType::f16;
  p.batch = 2;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 16;
  p.seqlen_q = 5;
  p.seqlen_k = 7;
  p.total_q = 10;
  p.total_k = 14;
  return p;
}

TEST_F(DeviceMemory, NeedCountsTheCallsTensorsAndScratch) {
  AttentionProblem p = small_problem();
  float lse_storage = 0.0f;

  DeviceMemoryNeed fwd = device_memory_need(p, Direction::forward, 100);  // q, out, k, v
  EXPECT_EQ(fwd.tensor_bytes, 2u * 1280 + 2u * 896);
  EXPECT_EQ(fwd.scratch_bytes, 100u);
  EXPECT_EQ(fwd.total(), 2u * 1280 + 2u * 896 + 100);

  p.lse = &lse_storage;  // + lse
  fwd = device_memory_need(p, Direction::forward, 0);
  EXPECT_EQ(fwd.tensor_bytes, 2u * 1280 + 2u * 896 + 160);

  // dout, q, out, dq | k, v, dk, dv | lse
  const DeviceMemoryNeed bwd = device_memory_need(p, Direction::backward, 7);
  EXPECT_EQ(bwd.tensor_bytes, 4u * 1280 + 4u * 896 + 160);
  EXPECT_EQ(bwd.total(), 4u * 1280 + 4u * 896 + 160 + 7);

  // Varlen: + cu_seqlens_q and cu_seqlens_k, int32 [batch + 1] each.
  const std::int32_t offsets[3] = {0, 5, 10};
  p.cu_seqlens_q = offsets;
  p.cu_seqlens_k = offsets;
  EXPECT_EQ(device_memory_need(p, Direction::backward, 0).tensor_bytes, 4u * 1280 + 4u * 896 + 160 + 2u * 3 * 4);

  // f32 doubles the element bytes, lse stays f32.
  p = small_problem();
  p.dtype = DType::f32;
  EXPECT_EQ(device_memory_need(p, Direction::forward, 0).tensor_bytes, 2u * 2560 + 2u * 1792);

  // An empty call needs only its scratch.
  p.total_q = p.total_k = 0;
  EXPECT_EQ(device_memory_need(p, Direction::forward, 0).total(), 0u);
}

TEST_F(DeviceMemory, NeedSaturatesInsteadOfWrapping) {
  AttentionProblem p = small_problem();
  p.total_q = std::int64_t{1} << 31;
  p.num_heads = std::int64_t{1} << 31;
  p.head_dim = 256;
  const DeviceMemoryNeed need = device_memory_need(p, Direction::backward, 1);
  EXPECT_EQ(need.total(), std::numeric_limits<std::size_t>::max());
}

TEST_F(DeviceMemory, ErrorTextNamesNeedPartsLimitAndSource) {
  DeviceMemoryNeed need;
  need.tensor_bytes = 17 * GiB;
  need.scratch_bytes = 13 * GiB / 10;
  const DeviceMemoryLimit limit{16 * GiB, "FASTATTN_DEVICE_MEMORY_LIMIT=16G"};
  EXPECT_EQ(device_memory_error("cuda forward", need, limit),
            "cuda forward: needs 18.3 GiB of device memory (tensors 17 GiB + scratch 1.3 GiB = " +
                std::to_string(need.total()) +
                " bytes), over the 16 GiB limit (17179869184 bytes) set by FASTATTN_DEVICE_MEMORY_LIMIT=16G");
  expect_error([&] { check_device_memory("cuda backward", need, limit); }, ErrorCode::out_of_memory,
               "cuda backward: needs 18.3 GiB of device memory");

  // Fits: at the limit exactly, under it, or no limit.
  EXPECT_EQ(device_memory_error("cuda forward", need, {need.total(), "x"}), "");
  EXPECT_EQ(device_memory_error("cuda forward", need, {64 * GiB, "x"}), "");
  EXPECT_EQ(device_memory_error("cuda forward", need, {}), "");
  EXPECT_NO_THROW(check_device_memory("cuda forward", need, {need.total(), "x"}));
  EXPECT_NE(device_memory_error("cuda forward", need, {need.total() - 1, "x"}), "");
}

TEST_F(DeviceMemory, LimitComesFromOptionThenProcessThenEnvironment) {
  {
    ScopedEnv unset(kDeviceMemoryLimitEnv, std::nullopt);
    const DeviceMemoryLimit none = device_memory_limit();
    EXPECT_EQ(none.bytes, 0u);
    EXPECT_EQ(none.source, "");
  }
  ScopedEnv env(kDeviceMemoryLimitEnv, std::string("16G"));
  DeviceMemoryLimit l = device_memory_limit();
  EXPECT_EQ(l.bytes, 16 * GiB);
  EXPECT_EQ(l.source, "FASTATTN_DEVICE_MEMORY_LIMIT=16G");

  set_device_memory_limit(32 * GiB);
  l = device_memory_limit();
  EXPECT_EQ(l.bytes, 32 * GiB);
  EXPECT_EQ(l.source, "set_device_memory_limit()");

  l = effective_device_memory_limit(MiB);  // the call's option wins
  EXPECT_EQ(l.bytes, MiB);
  EXPECT_EQ(l.source, "options.device_memory_limit_bytes");

  set_device_memory_limit(0);  // no limit, despite the environment
  EXPECT_EQ(device_memory_limit().bytes, 0u);
  EXPECT_EQ(effective_device_memory_limit(0).bytes, 0u);

  set_device_memory_limit(std::nullopt);  // back to the environment
  EXPECT_EQ(effective_device_memory_limit(0).bytes, 16 * GiB);

  ScopedEnv zero(kDeviceMemoryLimitEnv, std::string("0"));
  EXPECT_EQ(device_memory_limit().bytes, 0u);
  ScopedEnv empty(kDeviceMemoryLimitEnv, std::string(""));
  EXPECT_EQ(device_memory_limit().bytes, 0u);
}

TEST_F(DeviceMemory, BadEnvironmentValueNamesTheVariable) {
  ScopedEnv env(kDeviceMemoryLimitEnv, std::string("16 gigs"));
  expect_error([] { device_memory_limit(); }, ErrorCode::invalid_argument,
               "FASTATTN_DEVICE_MEMORY_LIMIT: expected bytes or a size with a unit");
  expect_error([] { device_memory_limit(); }, ErrorCode::invalid_argument, "got '16 gigs'");
  // A limit set in the process or on the call does not read the variable.
  set_device_memory_limit(GiB);
  EXPECT_EQ(device_memory_limit().bytes, GiB);
  EXPECT_EQ(effective_device_memory_limit(KiB).bytes, KiB);
}

// The CPU backends run whatever the limit and report no device memory.
TEST_F(DeviceMemory, CpuBackendsIgnoreTheLimit) {
  ScopedEnv env(kDeviceMemoryLimitEnv, std::string("not a size"));
  set_device_memory_limit(1);
  for (Backend backend : {Backend::cpu, Backend::reference}) {
    harness::CaseData data(harness::parse_case("b=2 sq=9 sk=11 h=4 hkv=2 d=64 dtype=f32 mask=causal seed=3"));
    AttentionOptions o = data.options(backend);
    o.device_memory_limit_bytes = 1;
    const KernelChoice fwd = forward(data.q.view(), data.k.view(), data.v.view(), data.out.view(), data.lse.view(), o);
    EXPECT_EQ(fwd.device_memory_bytes, 0u) << fwd.describe();
    const KernelChoice bwd = backward(data.dout.view(), data.q.view(), data.k.view(), data.v.view(), data.out.view(),
                                      data.lse.view(), data.dq.view(), data.dk.view(), data.dv.view(), o);
    EXPECT_EQ(bwd.device_memory_bytes, 0u) << bwd.describe();
  }
  const harness::CheckReport r = harness::check_case(
      harness::parse_case("b=1 sq=33 sk=40 h=2 hkv=1 d=64 dtype=f32 mask=none seed=5"), Backend::cpu);
  expect_pass(r);
}

}  // namespace
}  // namespace fastattn::testing
