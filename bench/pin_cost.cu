// SPDX-License-Identifier: GPL-3.0-or-later
// What pinning a 12 MP RGB image's 36 MB costs each way the CUDA runtime offers (cudaHostAlloc;
// cudaHostRegister on malloc'd memory, on 2 MB-aligned huge-page memory untouched and touched),
// freeing it, and whether pinning on one thread holds up another thread's GPU call (36 MB up, a
// kernel, 36 MB down). Results in docs/BENCHMARKS.md, "Pinned memory and huge pages".
// Build: nvcc -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 bench/pin_cost.cu -o pin_cost
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <thread>
#include <atomic>
#include <vector>
static double now() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
const size_t B = 36000000; const int N = 8;
__global__ void spin(float *d, size_t n) { size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; if (i < n) { float v = d[i]; for (int k = 0; k < 200; k++) v = v * 0.999f + 0.001f; d[i] = v; } }
int main() {
  double t = now(); cudaFree(0); printf("context %.1f ms\n", now() - t);
  std::vector<void *> p(N);
  t = now(); for (int i = 0; i < N; i++) cudaHostAlloc(&p[i], B, cudaHostAllocPortable); printf("cudaHostAlloc: %.1f ms a block\n", (now() - t) / N);
  t = now(); for (int i = 0; i < N; i++) cudaFreeHost(p[i]); printf("cudaFreeHost: %.1f ms a block\n", (now() - t) / N);
  for (int mode = 0; mode < 3; mode++) {
    double ta = 0, tr = 0, tu = 0;
    for (int i = 0; i < N; i++) {
      double a = now();
      if (mode == 0) p[i] = malloc(B); else { posix_memalign(&p[i], 2 << 20, (B + (2 << 20) - 1) / (2 << 20) * (2 << 20)); madvise(p[i], (B + (2 << 20) - 1) / (2 << 20) * (2 << 20), MADV_HUGEPAGE); }
      if (mode == 2) memset(p[i], 0, B);
      ta += now() - a; a = now();
      if (cudaHostRegister(p[i], B, cudaHostRegisterPortable) != cudaSuccess) printf("register failed\n");
      tr += now() - a;
    }
    double a = now(); for (int i = 0; i < N; i++) { cudaHostUnregister(p[i]); free(p[i]); } tu = (now() - a) / N;
    printf("register %s: alloc %.1f, cudaHostRegister %.1f, unregister+free %.1f ms a block\n",
           mode == 0 ? "malloc" : mode == 1 ? "2MB-aligned THP, untouched" : "2MB-aligned THP, touched", ta / N, tr / N, tu);
  }
  // 4 threads pinning at once
  t = now(); { std::vector<std::thread> th; for (int k = 0; k < 4; k++) th.emplace_back([&, k] { for (int i = k; i < N; i += 4) cudaHostAlloc(&p[i], B, cudaHostAllocPortable); }); for (auto &x : th) x.join(); }
  printf("cudaHostAlloc, 4 threads: %.1f ms a block (wall)\n", (now() - t) / N);
  // a GPU "call" (H2D 36 MB, kernel, D2H 36 MB from pinned) alone and while another thread pins
  float *d; cudaMalloc(&d, B); cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto call = [&] { double a = now(); cudaMemcpyAsync(d, p[0], B, cudaMemcpyHostToDevice, s); spin<<<(B / 4 + 255) / 256, 256, 0, s>>>(d, B / 4); cudaMemcpyAsync(p[1], d, B, cudaMemcpyDeviceToHost, s); cudaStreamSynchronize(s); return now() - a; };
  call(); double alone = 0; for (int i = 0; i < 10; i++) alone += call(); alone /= 10;
  std::atomic<bool> stop{false}; int pins = 0;
  std::thread pinner([&] { while (!stop) { void *q; cudaHostAlloc(&q, B, cudaHostAllocPortable); cudaFreeHost(q); pins++; } });
  double busy = 0; for (int i = 0; i < 10; i++) busy += call(); busy /= 10; stop = true; pinner.join();
  std::thread pinner2([&] { stop = false; while (!stop) { void *q = malloc(B); cudaHostRegister(q, B, cudaHostRegisterPortable); cudaHostUnregister(q); free(q); } });
  double busy2 = 0; for (int i = 0; i < 10; i++) busy2 += call(); busy2 /= 10; stop = true; pinner2.join();
  printf("a call: alone %.2f ms, while another thread cudaHostAllocs+frees %.2f ms (%d pins), while it registers %.2f ms\n", alone, busy, pins, busy2);
  for (int i = 0; i < N; i++) cudaFreeHost(p[i]);
  t = now(); cudaDeviceReset(); printf("cudaDeviceReset %.1f ms\n", now() - t);
  return 0;
}
