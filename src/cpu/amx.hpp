// amx.hpp — the AMX tile layer of the CPU backend: detection, tile configuration, the tile
// operations as a policy type (native AMX or an exact software emulation of it), and the bf16
// GEMM building block the AMX kernels (forward, backward, decode) are made of.
//
// Usage (in a file compiled with the AMX flags, *_amx.cpp, entered only when amx_available()):
//   using E = amx::Native;                       // or amx::Emulated: same semantics, any CPU
//   amx::TileScope<E> scope(amx::gemm_config()); // ldtilecfg now, tilerelease at scope end
//   amx::gemm_bf16<E>(m, n, k, a, lda, b, ldb, c, ldc, /*accumulate=*/true);
//
// Tiles (palette 1, as AMX-BF16 uses them): 8 tiles of up to 16 rows x 64 bytes.
//   bf16 operand tile  (16, 32) bf16 = (16, 16) 32-bit words
//   f32 accumulator    (16, 16) f32
// tdpbf16ps C, A, B  (Engine::dp<C, A, B>()):
//   C: (16, 16) f32        C(m, n) += sum_{p < 16} A(m, 2p) B(p, n).lo + A(m, 2p+1) B(p, n).hi
//   A: (16, 32) bf16, row-major (one row = 32 consecutive k)
//   B: (16, 16) bf16 pairs ("VNNI"): row p, word n = (B(2p, n), B(2p+1, n)), the lower k in
//      the low half. A K x N bf16 matrix in this layout is (K / 2) rows of N pairs.
// Products of two bf16 are exact in f32; the two of a pair are added into C one after the other
// (the order of the SDM's pseudo-code; denormal inputs count as 0 natively). Emulated does the
// same with two f32 adds per pair. The hardware rounds differently inside (measured on a Sapphire
// Rapids: 55-85% of outputs bitwise equal, also against an emulation that rounds the pair sum
// once), so native and emulated agree within the f32 accumulation bound, not bitwise:
// |native - emulated| <= 2 (k + 1) 2^-24 sum |a b| (tests/cpu_amx_test.cpp checks it).
//
// The emulation exists so machines without AMX (CI) run the same tiling and indexing as the AMX
// kernels: kernels are written once against the Engine interface below and instantiated for
// both. FASTATTN_CPU_AMX (native / emulated / off; unset: native when available) picks one at
// run time (amx_mode()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <immintrin.h>
#define FASTATTN_AMX_NATIVE 1
#else
#define FASTATTN_AMX_NATIVE 0
#endif

namespace fastattn::cpu::amx {

// ---- detection (amx.cpp, plain flags) ---------------------------------------------------------

// True when CPUID reports AMX-TILE (leaf 7.0 EDX bit 24) and AMX-BF16 (bit 22), the OS enables
// the tile state in XCR0 (bits 17, 18), and Linux granted this process the tile data state
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once per process). Never throws.
bool amx_available() noexcept;
// Why amx_available() is false ("" when it is true), e.g. "the OS refused the AMX tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM: Operation not permitted)".
const char* amx_unavailable_reason() noexcept;

// Which engine the AMX kernels run on. FASTATTN_CPU_AMX: native (an error without AMX),
// emulated (any CPU), off; unset or empty: native when amx_available(), else off.
enum class AmxMode { off, native, emulated };
inline constexpr const char* kAmxEnv = "FASTATTN_CPU_AMX";
const char* to_string(AmxMode mode) noexcept;  // "off", "native", "emulated"
// Reads FASTATTN_CPU_AMX from the environment snapshot; throws Error(invalid_argument) naming
// the variable on a bad value, Error(unsupported) for native without AMX.
AmxMode amx_mode();
// Whether FASTATTN_CPU_AMX was set to something (the reason text says so).
bool amx_mode_from_environment();

// ---- tile configuration -----------------------------------------------------------------------

// The 64-byte operand of ldtilecfg (palette 1).
struct alignas(64) TileConfig {
  std::uint8_t palette_id = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};  // bytes per row of tile t
  std::uint8_t rows[16] = {};    // rows of tile t
  void set(int tile, int n_rows, int bytes_per_row) {
    rows[tile] = static_cast<std::uint8_t>(n_rows);
    colsb[tile] = static_cast<std::uint16_t>(bytes_per_row);
  }
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// The tile numbers of gemm_config(): C00 C01 C10 C11 (f32 accumulators of a 32 x 32 block),
// A0 A1 (16 x 32 bf16 rows of A for C row-blocks 0 and 1), B0 B1 (16 x 16 pairs of B for
// C column-blocks 0 and 1). All 8 tiles are full size: 16 rows x 64 bytes.
enum GemmTile : int { kC00 = 0, kC01 = 1, kC10 = 2, kC11 = 3, kA0 = 4, kA1 = 5, kB0 = 6, kB1 = 7 };
inline TileConfig gemm_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.set(t, 16, 64);
  return cfg;
}

inline constexpr int kTileRows = 16;       // rows of every tile of gemm_config()
inline constexpr int kTileBytes = 64;      // bytes per row
inline constexpr int kTileK = 32;          // bf16 k-elements per tdpbf16ps
inline constexpr int kTileN = 16;          // f32 columns of a C tile

// ---- engines ------------------------------------------------------------------------------------
// Engine interface (static, per thread; tile numbers are template arguments as the
// instructions need immediates):
//   configure(cfg) / release()                     ldtilecfg / tilerelease
//   zero<T>()                                      tilezero
//   load<T>(ptr, stride_bytes) / store<T>(...)     tileloadd / tilestored (rows x colsb of T)
//   dp<C, A, B>()                                  tdpbf16ps

#if FASTATTN_AMX_NATIVE
// The AMX instructions. Only in files compiled with -mamx-tile -mamx-bf16, and only entered
// after amx_available().
struct Native {
  static constexpr bool kNative = true;
  static constexpr const char* kName = "amx";
  // GCC's _tile_* macros paste their tile argument into the instruction text, so a template
  // parameter cannot pass through them; these are the same instructions with the tile number as
  // an immediate ("i", printed by %c), plus a memory clobber on loads and stores so that the
  // compiler keeps plain stores to the same memory in order.
  static void configure(const TileConfig& cfg) { _tile_loadconfig(&cfg); }
  static void release() { _tile_release(); }
  template <int T>
  static void zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void load(const void* p, std::int64_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void stream_load(const void* p, std::int64_t stride) {
    __asm__ volatile("tileloaddt1 (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* p, std::int64_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int C, int A, int B>
  static void dp() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};
#endif

// The same operations on 8 per-thread 1 KiB tile buffers in plain C++: bit-compatible layouts
// and the tdpbf16ps accumulation order (pair products added one after the other into C, both
// exact, so each add is one f32 rounding; f32 FMA of the exact product gives the same result).
// Rows and bytes per row follow the configuration like the hardware's.
struct Emulated {
  static constexpr bool kNative = false;
  static constexpr const char* kName = "amx-emulated";
  struct State {
    TileConfig cfg;
    alignas(64) unsigned char tile[8][kTileRows * kTileBytes];
  };
  static State& state() {
    static thread_local State s;
    return s;
  }
  static void configure(const TileConfig& cfg) { state().cfg = cfg; }
  static void release() { state().cfg = TileConfig{}; }
  template <int T>
  static void zero() { std::memset(state().tile[T], 0, sizeof(State::tile[T])); }
  template <int T>
  static void load(const void* p, std::int64_t stride) {
    State& s = state();
    std::memset(s.tile[T], 0, sizeof(State::tile[T]));
    for (int r = 0; r < s.cfg.rows[T]; ++r) {
      std::memcpy(s.tile[T] + r * kTileBytes, static_cast<const unsigned char*>(p) + r * stride, s.cfg.colsb[T]);
    }
  }
  template <int T>
  static void stream_load(const void* p, std::int64_t stride) { load<T>(p, stride); }
  template <int T>
  static void store(void* p, std::int64_t stride) {
    const State& s = state();
    for (int r = 0; r < s.cfg.rows[T]; ++r) {
      std::memcpy(static_cast<unsigned char*>(p) + r * stride, s.tile[T] + r * kTileBytes, s.cfg.colsb[T]);
    }
  }
  template <int C, int A, int B>
  static void dp() {
    State& s = state();
    const int m_rows = s.cfg.rows[C], n_cols = s.cfg.colsb[C] / 4, k_pairs = s.cfg.colsb[A] / 4;
    float* c = reinterpret_cast<float*>(s.tile[C]);
    const std::uint32_t* a = reinterpret_cast<const std::uint32_t*>(s.tile[A]);
    const std::uint32_t* b = reinterpret_cast<const std::uint32_t*>(s.tile[B]);
    for (int m = 0; m < m_rows; ++m) {
      float* c_row = c + m * (kTileBytes / 4);
      for (int p = 0; p < k_pairs; ++p) {
        const std::uint32_t aw = a[m * (kTileBytes / 4) + p];
        const float a_lo = widen(aw & 0xffffu), a_hi = widen(aw >> 16);
        const std::uint32_t* b_row = b + p * (kTileBytes / 4);
        for (int n = 0; n < n_cols; ++n) {
          float acc = c_row[n];
          acc += a_lo * widen(b_row[n] & 0xffffu);  // exact product, one rounding
          acc += a_hi * widen(b_row[n] >> 16);
          c_row[n] = acc;
        }
      }
    }
  }
  // bf16 bits -> f32; denormals count as 0 like the hardware's (DAZ).
  static float widen(std::uint32_t bits) {
    std::uint32_t w = bits << 16;
    if ((w & 0x7f800000u) == 0) w &= 0x80000000u;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
  }
};

// ldtilecfg at construction, tilerelease at destruction (one per thread and kernel call:
// configuring costs tens of cycles, and the released state keeps context switches cheap).
template <class Engine>
class TileScope {
 public:
  explicit TileScope(const TileConfig& cfg) { Engine::configure(cfg); }
  ~TileScope() { Engine::release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// ---- the bf16 GEMM building block -------------------------------------------------------------
// C (m, n) f32 (+)= A (m, k) bf16 * B (k, n) bf16, with the tiles of gemm_config() configured:
//   A: (m, k)       bf16, row-major, lda elements between rows
//   B: (k / 2, n)   32-bit bf16 pairs (VNNI), ldb words between pair rows
//   C: (m, n)       f32, row-major, ldc floats between rows
// m and n multiples of 16, k a multiple of 32 (callers pad with zeros: a padded k must be 0 in A
// or B). Register block 32 x 32 (C00..C11 stay in tiles for the whole k loop: per 32-element
// k-step 2 A + 2 B tile loads feed 4 tdpbf16ps); 16-wide edges use C00 with A0/B0.
// accumulate = false starts C from 0 (the old C is not read).
template <class Engine>
void gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
               const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  const std::int64_t sa = lda * 2, sb = ldb * 4, sc = ldc * 4;  // byte strides
  std::int64_t i = 0;
  for (; i + 32 <= m; i += 32) {
    std::int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      float* c0 = c + i * ldc + j;
      float* c1 = c0 + 16 * ldc;
      if (accumulate) {
        Engine::template load<kC00>(c0, sc);
        Engine::template load<kC01>(c0 + 16, sc);
        Engine::template load<kC10>(c1, sc);
        Engine::template load<kC11>(c1 + 16, sc);
      } else {
        Engine::template zero<kC00>();
        Engine::template zero<kC01>();
        Engine::template zero<kC10>();
        Engine::template zero<kC11>();
      }
      for (std::int64_t p = 0; p < k; p += 32) {
        Engine::template load<kA0>(a + i * lda + p, sa);
        Engine::template load<kB0>(b + (p / 2) * ldb + j, sb);
        Engine::template load<kA1>(a + (i + 16) * lda + p, sa);
        Engine::template load<kB1>(b + (p / 2) * ldb + j + 16, sb);
        Engine::template dp<kC00, kA0, kB0>();
        Engine::template dp<kC01, kA0, kB1>();
        Engine::template dp<kC10, kA1, kB0>();
        Engine::template dp<kC11, kA1, kB1>();
      }
      Engine::template store<kC00>(c0, sc);
      Engine::template store<kC01>(c0 + 16, sc);
      Engine::template store<kC10>(c1, sc);
      Engine::template store<kC11>(c1 + 16, sc);
    }
    for (; j < n; j += 16) {  // 32 x 16 edge
      float* c0 = c + i * ldc + j;
      float* c1 = c0 + 16 * ldc;
      if (accumulate) {
        Engine::template load<kC00>(c0, sc);
        Engine::template load<kC10>(c1, sc);
      } else {
        Engine::template zero<kC00>();
        Engine::template zero<kC10>();
      }
      for (std::int64_t p = 0; p < k; p += 32) {
        Engine::template load<kB0>(b + (p / 2) * ldb + j, sb);
        Engine::template load<kA0>(a + i * lda + p, sa);
        Engine::template load<kA1>(a + (i + 16) * lda + p, sa);
        Engine::template dp<kC00, kA0, kB0>();
        Engine::template dp<kC10, kA1, kB0>();
      }
      Engine::template store<kC00>(c0, sc);
      Engine::template store<kC10>(c1, sc);
    }
  }
  for (; i < m; i += 16) {  // 16-row edge
    for (std::int64_t j = 0; j < n; j += 16) {
      float* c0 = c + i * ldc + j;
      if (accumulate) {
        Engine::template load<kC00>(c0, sc);
      } else {
        Engine::template zero<kC00>();
      }
      for (std::int64_t p = 0; p < k; p += 32) {
        Engine::template load<kA0>(a + i * lda + p, sa);
        Engine::template load<kB0>(b + (p / 2) * ldb + j, sb);
        Engine::template dp<kC00, kA0, kB0>();
      }
      Engine::template store<kC00>(c0, sc);
    }
  }
}

// B (k, n) bf16 row-major (ld elements) -> VNNI pairs (k / 2, n) words (ldb words); k even.
inline void pack_vnni(std::int64_t k, std::int64_t n, const std::uint16_t* src, std::int64_t ld, std::uint32_t* dst,
                      std::int64_t ldb) {
  for (std::int64_t p = 0; p < k / 2; ++p) {
    const std::uint16_t* lo = src + 2 * p * ld;
    const std::uint16_t* hi = lo + ld;
    for (std::int64_t j = 0; j < n; ++j) dst[p * ldb + j] = lo[j] | (static_cast<std::uint32_t>(hi[j]) << 16);
  }
}

// Kernels of this layer that tests and tools call from files with plain flags (amx_gemm_amx.cpp,
// amx.cpp): gemm_bf16 under its own TileScope. native needs amx_available() (throws otherwise).
void gemm_bf16_native(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                      const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate);
void gemm_bf16_emulated(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                        const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate);
// True when this build has the native AMX code (CMake FASTATTN_CPU_AMX and compiler support).
bool amx_compiled() noexcept;

}  // namespace fastattn::cpu::amx
