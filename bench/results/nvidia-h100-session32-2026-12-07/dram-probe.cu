#include <cstdio>
#include <cuda_runtime.h>
int main() {
  int n = 0; cudaGetDeviceCount(&n);
  for (int d = 0; d < n; ++d) {
    int khz = 0, bits = 0, sms = 0; char name[256] = {};
    cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, d);
    cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, d);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d);
    cudaDeviceProp p; cudaGetDeviceProperties(&p, d);
    double gbs = 2.0 * khz * 1e3 * (bits / 8.0) / 1e9;
    printf("%s: memory clock %d kHz, bus %d bits, %d SMs -> %.0f GB/s, %.1f GB/s per SM\n", p.name, khz, bits, sms, gbs, gbs / sms);
  }
}
