#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>
struct Cfg { uint8_t palette, start; uint8_t r[14]; uint16_t colsb[16]; uint8_t rows[16]; };
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  const int K = 32768;  // keys
  std::vector<uint16_t> kmat(size_t(K) * 128, 0x3f80);  // K rows d=128 bf16
  std::vector<uint32_t> qt(64 * 16, 0x3f803f80);         // Q^T pairs (64 d-pairs x 16 cols)
  alignas(64) float c[16 * 16];
  for (int ncols : {4, 16}) {
    Cfg cfg{}; cfg.palette = 1;
    // tile 0: C 16 rows x ncols*4 bytes; tile 1: A (16 keys x 64 B); tile 2: B (16 pair rows x ncols*4 B)
    cfg.rows[0] = 16; cfg.colsb[0] = ncols * 4;
    cfg.rows[1] = 16; cfg.colsb[1] = 64;
    cfg.rows[2] = 16; cfg.colsb[2] = ncols * 4;
    for (int t = 3; t < 6; ++t) { cfg.rows[t] = 16; cfg.colsb[t] = ncols * 4; }
    cfg.rows[6] = 16; cfg.colsb[6] = 64;
    _tile_loadconfig(&cfg);
    for (int t = 2; t < 6; ++t) {}
    _tile_loadd(2, qt.data() + 0 * 256, 64); _tile_loadd(3, qt.data() + 1 * 256, 64);
    _tile_loadd(4, qt.data() + 2 * 256, 64); _tile_loadd(5, qt.data() + 3 * 256, 64);
    double best = 1e9;
    for (int rep = 0; rep < 20; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int kb = 0; kb < 1024; kb += 16) {  // 1024 keys: in L1/L2 (256 KB)
        _tile_zero(0);
        _tile_loadd(1, kmat.data() + size_t(kb) * 128 + 0, 256);
        _tile_loadd(6, kmat.data() + size_t(kb) * 128 + 32, 256);
        _tile_dpbf16ps(0, 1, 2);
        _tile_dpbf16ps(0, 6, 3);
        _tile_loadd(1, kmat.data() + size_t(kb) * 128 + 64, 256);
        _tile_loadd(6, kmat.data() + size_t(kb) * 128 + 96, 256);
        _tile_dpbf16ps(0, 1, 4);
        _tile_dpbf16ps(0, 6, 5);
        _tile_stored(0, c, ncols * 4);
      }
      auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    std::printf("ncols %d: %.1f ns per key (1024 keys, 4 tdp each 16 keys)\n", ncols, best / 1024 * 1e9);
    _tile_release();
  }
  // vdpbf16ps reference: 4 rows x 128 d per key
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512bh q[4][4];
  for (int r = 0; r < 4; ++r) for (int c4 = 0; c4 < 4; ++c4) q[r][c4] = (__m512bh)_mm512_set1_epi16(0x3f80);
  double best = 1e9;
  for (int rep = 0; rep < 20; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 1024; k += 4) {
      __m512 a[4][4];
      for (int j = 0; j < 4; ++j) for (int r = 0; r < 4; ++r) a[j][r] = _mm512_setzero_ps();
      for (int c4 = 0; c4 < 4; ++c4) {
        for (int j = 0; j < 4; ++j) {
          __m512bh kv = (__m512bh)_mm512_loadu_si512(kmat.data() + size_t(k + j) * 128 + c4 * 32);
          for (int r = 0; r < 4; ++r) a[j][r] = _mm512_dpbf16_ps(a[j][r], kv, q[r][c4]);
        }
      }
      for (int j = 0; j < 4; ++j) for (int r = 0; r < 4; ++r) acc[r] = _mm512_add_ps(acc[r], a[j][r]);
    }
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  float s = 0; for (int r = 0; r < 4; ++r) s += _mm512_reduce_add_ps(acc[r]);
  std::printf("vdpbf16ps 4 rows: %.1f ns per key (%g)\n", best / 1024 * 1e9, s);
}
