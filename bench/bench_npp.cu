/* SPDX-License-Identifier: GPL-3.0-or-later */
/* NVIDIA NPP as a benchmark peer: times NPP's median, general 2-D filter and
 * Gaussian on the same 12-megapixel RGB u8 image the cudafx GPU benchmark
 * uses (device-resident, CUDA events, median of runs). Reads the raw image
 * from the file given (H W then H*W*3 bytes, as bench/bench_gpu.py writes it)
 * and prints one "npp WORKLOAD MS" line per workload; a second argument caps
 * the median windows measured (NPP's 31x31 takes about a minute). Not part
 * of cudafx. */
#include <cuda_runtime.h>
#include <npp.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf (stderr, "%s: %s\n", #x, cudaGetErrorString (e_)); return 1; } } while (0)
#define CHECK_NPP(x) do { NppStatus s_ = (x); if (s_ < 0) { \
  fprintf (stderr, "%s: NPP status %d\n", #x, (int) s_); return 1; } } while (0)

template <typename F>
static float
time_ms (F f)
{
  cudaEvent_t a, b;
  cudaEventCreate (&a);
  cudaEventCreate (&b);
  for (int i = 0; i < 3; i++)
    f ();
  std::vector<float> t;
  for (int i = 0; i < 15; i++)
    {
      cudaEventRecord (a);
      f ();
      cudaEventRecord (b);
      cudaEventSynchronize (b);
      float ms;
      cudaEventElapsedTime (&ms, a, b);
      t.push_back (ms);
    }
  std::sort (t.begin (), t.end ());
  return t[t.size () / 2];
}

int
main (int argc, char **argv)
{
  if (argc != 2 && argc != 3)
    {
      fprintf (stderr, "usage: bench_npp RAWFILE [LARGEST-MEDIAN-WINDOW]\n");
      return 2;
    }
  const int median_max = argc == 3 ? atoi (argv[2]) : 31;
  FILE *f = fopen (argv[1], "rb");
  int h, w;
  if (!f || fscanf (f, "%d %d\n", &h, &w) != 2)
    {
      fprintf (stderr, "cannot read %s\n", argv[1]);
      return 1;
    }
  std::vector<unsigned char> img ((size_t) h * w * 3);
  if (fread (img.data (), 1, img.size (), f) != img.size ())
    return 1;
  fclose (f);

  /* NPP filters read outside the ROI: give the source a 15-pixel margin. */
  const int margin = 15;
  int pw = w + 2 * margin, ph = h + 2 * margin;
  Npp8u *d_src, *d_dst, *d_buf = NULL;
  size_t src_step, dst_step;
  CHECK_CUDA (cudaMallocPitch (&d_src, &src_step, (size_t) pw * 3, ph));
  CHECK_CUDA (cudaMallocPitch (&d_dst, &dst_step, (size_t) w * 3, h));
  CHECK_CUDA (cudaMemset2D (d_src, src_step, 128, (size_t) pw * 3, ph));
  CHECK_CUDA (cudaMemcpy2D (d_src + margin * src_step + margin * 3, src_step, img.data (), (size_t) w * 3,
                            (size_t) w * 3, h, cudaMemcpyHostToDevice));
  const Npp8u *roi_src = d_src + margin * src_step + margin * 3;
  NppiSize roi = { w, h };
  /* CUDA 13's NPP has no nppGetStreamContext: fill the context ourselves. */
  NppStreamContext ctx = {};
  cudaDeviceProp prop;
  CHECK_CUDA (cudaGetDeviceProperties (&prop, 0));
  ctx.hStream = 0;
  ctx.nCudaDeviceId = 0;
  ctx.nMultiProcessorCount = prop.multiProcessorCount;
  ctx.nMaxThreadsPerMultiProcessor = prop.maxThreadsPerMultiProcessor;
  ctx.nMaxThreadsPerBlock = prop.maxThreadsPerBlock;
  ctx.nSharedMemPerBlock = prop.sharedMemPerBlock;
  ctx.nCudaDevAttrComputeCapabilityMajor = prop.major;
  ctx.nCudaDevAttrComputeCapabilityMinor = prop.minor;
  ctx.nStreamFlags = 0;

  int median_sizes[] = { 3, 5, 7, 15, 31 };
  for (int k : median_sizes)
    {
      NppiSize mask = { k, k };
      NppiPoint anchor = { k / 2, k / 2 };
      Npp32u buf_size = 0;
      CHECK_NPP (nppiFilterMedianGetBufferSize_8u_C3R_Ctx (roi, mask, &buf_size, ctx));
      cudaFree (d_buf);
      CHECK_CUDA (cudaMalloc (&d_buf, buf_size));
      /* NPP's median cannot take windows this large from a 15-pixel margin. */
      if (k / 2 > margin || k > median_max)
        continue;
      NppStatus st = NPP_SUCCESS;
      float ms = time_ms ([&] {
        st = nppiFilterMedian_8u_C3R_Ctx (roi_src, (int) src_step, d_dst, (int) dst_step, roi, mask, anchor,
                                          d_buf, ctx);
      });
      if (st < 0)
        printf ("npp median-%dx%d error %d\n", k, k, (int) st);
      else
        printf ("npp median-%dx%d %.4f\n", k, k, ms);
    }

  int filter_sizes[] = { 5, 15 };
  for (int k : filter_sizes)
    {
      std::vector<Npp32f> taps (k * k);
      for (int i = 0; i < k * k; i++)
        taps[i] = (float) ((i * 7919) % 13 - 6) / (k * k);
      Npp32f *d_taps;
      CHECK_CUDA (cudaMalloc (&d_taps, taps.size () * sizeof (Npp32f)));
      CHECK_CUDA (cudaMemcpy (d_taps, taps.data (), taps.size () * sizeof (Npp32f), cudaMemcpyHostToDevice));
      NppiSize ksize = { k, k };
      NppiPoint anchor = { k / 2, k / 2 };
      NppStatus st = NPP_SUCCESS;
      float ms = time_ms ([&] {
        st = nppiFilter32f_8u_C3R_Ctx (roi_src, (int) src_step, d_dst, (int) dst_step, roi, d_taps, ksize,
                                       anchor, ctx);
      });
      printf ("npp filter-%dx%d %s%.4f\n", k, k, st < 0 ? "error " : "", ms);
      cudaFree (d_taps);
    }

  NppStatus st = NPP_SUCCESS;
  float ms = time_ms ([&] {
    st = nppiFilterGauss_8u_C3R_Ctx (roi_src, (int) src_step, d_dst, (int) dst_step, roi, NPP_MASK_SIZE_15_X_15, ctx);
  });
  printf ("npp gauss-15x15 %s%.4f\n", st < 0 ? "error " : "", ms);

  float copy_ms = time_ms ([&] {
    cudaMemcpy2DAsync (d_dst, dst_step, roi_src, src_step, (size_t) w * 3, h, cudaMemcpyDeviceToDevice);
  });
  printf ("npp d2d-copy %.4f\n", copy_ms);
  return 0;
}
