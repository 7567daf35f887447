// cpu_stream_overlap.cpp — does this CPU overlap memory reads with compute? A probe for issue
// 17's CPU decode bar (docs/inference-cpu-decode.md, "One-token decode against the read bandwidth").
//
// It reads a K and a V array laid out as the decode kernel's cache ([tokens, kv_heads, head_dim]
// bf16: 32768 tokens, 8 KV heads, d 128, 128 MiB together) in the kernel's order (tiles of 32
// tokens; per tile, each head's rows in turn: rows a token stride, 2 KiB, apart), on 2 threads,
// and puts a fixed amount of f32 FMA work (`--work W`: W rounds of 4 FMAs on 4 chains) after
// every row pair (K row, V row). For
// each amount it prints three rates, GB/s of K+V:
//   memory    the reads from memory with that work
//   compute   the same loop on the first tile only (in L1/L2): the work's own rate
//   serial    1 / (1 / read + 1 / compute), read = the memory rate with no work: what the two
//             cost when they do not overlap at all
// A memory rate near `serial` means the memory time and the compute time add up on this CPU.
// --group G: G tokens of one head, then the same G tokens of the next head, and so on (G = 1:
// address order; the default, 0, is the whole 32-token tile per head, the kernel's order; G
// should divide 32). --prefetch and --touch act only with G = 0, one at a time.
// --prefetch: the next tile's rows of a head prefetched to L2 (_MM_HINT_T1) after the head's
// rows, as the decode kernel does (decode_tiles.hpp prefetch_rows). --touch: instead, one 8-byte
// demand load per line of an eighth of the next tile's K and V, in address order, after each head.
//
// Build and run (a dev probe, not part of the CMake build; AVX-512 CPUs):
//   g++ -O2 -mavx512f -mfma -fopenmp tools/dev/profile/cpu_stream_overlap.cpp -o /tmp/cpu_stream_overlap
//   /tmp/cpu_stream_overlap [--group G] [--prefetch | --touch] [--threads N] [--work 0,8,16,24]
// _mm512_reduce_add_ps starts from _mm256_undefined_pd(): GCC 12's -Wuninitialized (bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kTokens = 32768, kHeads = 8, kHeadDim = 128, kBlockK = 32;
constexpr std::size_t kTokenStride = std::size_t{kHeads} * kHeadDim;  // elements
constexpr std::size_t kElements = std::size_t{kTokens} * kTokenStride;

struct Options {
  int group = 0;  // tokens per head in a row before the next head: 0 = the whole tile (head order)
  bool prefetch = false;
  int touch = 0;  // 1: after each head's rows, demand-load one word of each line of 1/8 of the next tile's K and V, in address order
  int threads = 2;
  std::vector<int> work{0, 8, 16, 24};
};

// Loads a row pair (4 + 4 cache lines) into one value, then `work` rounds of 4 independent FMAs.
inline void row_pair(const std::uint16_t* k, const std::uint16_t* v, int work, __m512 (&acc)[4]) {
  __m512i x = _mm512_xor_si512(_mm512_loadu_si512(k), _mm512_loadu_si512(k + 32));
  x = _mm512_xor_si512(x, _mm512_xor_si512(_mm512_loadu_si512(k + 64), _mm512_loadu_si512(k + 96)));
  __m512i y = _mm512_xor_si512(_mm512_loadu_si512(v), _mm512_loadu_si512(v + 32));
  y = _mm512_xor_si512(y, _mm512_xor_si512(_mm512_loadu_si512(v + 64), _mm512_loadu_si512(v + 96)));
  // A small positive float from the bits, so the FMAs depend on the loads.
  const __m512 f = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_xor_si512(x, y), _mm512_set1_epi32(0x007fffff)),
                                                       _mm512_set1_epi32(0x3f000000)));
  const __m512 m = _mm512_set1_ps(0.999f);
  acc[0] = _mm512_add_ps(acc[0], f);
  for (int w = 0; w < work; ++w) {
    for (auto& a : acc) a = _mm512_fmadd_ps(a, m, f);
  }
}

// GB/s of K+V, best of 7 passes. in_cache: every tile reads the first tile's rows.
double rate(const std::uint16_t* K, const std::uint16_t* V, const Options& o, int work, bool in_cache) {
  double best = 0;
  for (int rep = 0; rep < 7; ++rep) {
    float sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(o.threads) reduction(+ : sink)
    {
      const int t = omp_get_thread_num();
      const int begin = t * kTokens / o.threads, end = (t + 1) * kTokens / o.threads;
      __m512 acc[4] = {_mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1)};
      for (int k0 = begin; k0 < end; k0 += kBlockK) {
        const int kn = std::min(kBlockK, end - k0), next = std::min(kBlockK, end - k0 - kn);
        const std::size_t base = static_cast<std::size_t>(in_cache ? begin : k0) * kTokenStride;
        for (int x = 0; x < kHeads * kn; ++x) {
          // Row x of the tile: g tokens of head 0, the same g of head 1, ... (g = kn: head by head)
          const int g = o.group > 0 ? std::min(o.group, kn) : kn;
          const int h = x / g % kHeads, j = x / (g * kHeads) * g + x % g;
          const std::size_t at = base + j * kTokenStride + static_cast<std::size_t>(h) * kHeadDim;
          row_pair(K + at, V + at, work, acc);
          if (o.touch && !in_cache && next > 0 && o.group == 0 && j == kn - 1) {
            const std::size_t bytes = static_cast<std::size_t>(next) * kTokenStride * 2 / kHeads;
            const char* kb = reinterpret_cast<const char*>(K + static_cast<std::size_t>(k0 + kn) * kTokenStride) + h * bytes;
            const char* vb = reinterpret_cast<const char*>(V + static_cast<std::size_t>(k0 + kn) * kTokenStride) + h * bytes;
            std::uint64_t words = 0;
            for (std::size_t b = 0; b < bytes; b += 64) {
              std::uint64_t a, c;
              std::memcpy(&a, kb + b, 8);
              std::memcpy(&c, vb + b, 8);
              words ^= a ^ c;
            }
            acc[1] = _mm512_add_ps(acc[1], _mm512_set1_ps(static_cast<float>(words & 1)));
          }
          if (o.prefetch && !in_cache && next > 0 && o.group == 0 && j == kn - 1) {
            for (int r = 0; r < next; ++r) {
              const std::size_t nx = (static_cast<std::size_t>(k0 + kn + r)) * kTokenStride + h * kHeadDim;
              for (int b = 0; b < kHeadDim; b += 32) {
                _mm_prefetch(reinterpret_cast<const char*>(K + nx + b), _MM_HINT_T1);
                _mm_prefetch(reinterpret_cast<const char*>(V + nx + b), _MM_HINT_T1);
              }
            }
          }
        }
      }
      sink += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * kElements * sizeof(std::uint16_t) / s / 1e9);
    if (sink == 1234.5f) std::printf(" ");  // keeps the work
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--group" && i + 1 < argc) {
      o.group = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--touch") {
      o.touch = 1;
    } else if (a == "--prefetch") {
      o.prefetch = true;
    } else if (a == "--threads" && i + 1 < argc) {
      o.threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--work" && i + 1 < argc) {
      o.work.clear();
      for (const char* p = argv[++i]; *p;) {
        o.work.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--group G] [--prefetch | --touch] [--threads N] [--work 0,8,16]\n", argv[0]);
      return 2;
    }
  }
  auto* K = static_cast<std::uint16_t*>(std::aligned_alloc(4096, kElements * 2));
  auto* V = static_cast<std::uint16_t*>(std::aligned_alloc(4096, kElements * 2));
  if (!K || !V) return 1;
  for (std::size_t i = 0; i < kElements; ++i) {  // nonzero, touched: the pages exist before timing
    K[i] = static_cast<std::uint16_t>(i * 7 + 1);
    V[i] = static_cast<std::uint16_t>(i * 13 + 1);
  }
  std::printf("%d threads, %d token%s of a head at a time, prefetch %s; GB/s of K+V (128 MiB: 32768 tokens x 8 heads x d128 bf16)\n",
              o.threads, o.group > 0 ? o.group : kBlockK, o.group == 1 ? "" : "s",
              o.prefetch ? "T1" : o.touch ? "none (touch)" : "none");
  std::printf("%6s %8s %8s %8s %s\n", "work", "memory", "compute", "serial", "memory / serial");
  const double read = rate(K, V, o, 0, false);  // no work: what this order reads
  for (int w : o.work) {
    const double mem = w == 0 ? read : rate(K, V, o, w, false), comp = rate(K, V, o, w, true);
    const double serial = 1.0 / (1.0 / read + 1.0 / comp);
    std::printf("%6d %8.1f %8.1f %8.1f %.2f\n", w, mem, comp, serial, mem / serial);
  }
  std::free(K);
  std::free(V);
  return 0;
}
