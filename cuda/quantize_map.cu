/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Colour quantize's mapping on the GPU, without dither: every pixel to its
 * nearest palette entry (map_kernel, on the features of the stripe), or,
 * when Lloyd ran over the distinct colours, every pixel votes and no
 * dither follows, through a table of each distinct colour's entry
 * (label_colours_kernel, then map_table_kernel), so that no pass reads
 * per-pixel features. The dithered mappings are quantize_dither.cu's. See
 * quantize.cuh. */
#include "quantize.cuh"

namespace {

/* this file's copies (quantize.cuh) */
__constant__ float c_centre[CUDAFX_MAX_COLORS][3];
__constant__ unsigned char c_pal_u8[CUDAFX_MAX_COLORS][3];
__constant__ float c_pal_f32[CUDAFX_MAX_COLORS][3];

/* The mapping's table when every pixel votes (every pixel's colour is then
 * among the distinct ones): each colour's nearest palette entry (c_centre),
 * into its key's bin. The same features and search as map_kernel's for
 * the pixels of that colour, so the same entry. */
__global__ void
label_colours_kernel (const float *plane0, const float *plane1, const float *plane2, const unsigned *keys, int n,
                      int dims, int k, unsigned *bins)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float fx = plane0[i], fy = dims == 3 ? plane1[i] : 0.0f, fz = dims == 3 ? plane2[i] : 0.0f;
  bins[keys[i]] = nearest_entry (fx, fy, fz, c_centre, k);
}

/* Each pixel to its nearest palette entry (features of the entries in
 * c_centre); alpha copied from the source. */
__global__ void
map_kernel (stripe_view v, int k, unsigned char *dst, size_t dst_pitch)
{
  size_t p = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= v.n)
    return;
  float fx, fy, fz;
  load_features (v, p, fx, fy, fz);
  int y = (int) (p / v.width), x = (int) (p - (size_t) y * v.width);
  int label = nearest_entry (fx, fy, fz, c_centre, k);
  write_entry (v, v.dims, x, y, c_pal_u8[label], c_pal_f32[label], dst, dst_pitch);
}

/* map_kernel through the table of label_colours_kernel: each pixel its
 * colour's entry (u8, every pixel voting). */
__global__ void
map_table_kernel (stripe_view v, const unsigned *bins, unsigned char *dst, size_t dst_pitch)
{
  size_t p = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= v.n)
    return;
  int y = (int) (p / v.width), x = (int) (p - (size_t) y * v.width);
  const unsigned char *px = v.src + (size_t) y * v.src_pitch + (size_t) x * v.channels;
  unsigned key = colour_key (px, v.dims);
  unsigned label = bins[key];
  write_entry (v, v.dims, x, y, c_pal_u8[label], c_pal_f32[label], dst, dst_pitch);
}

} // namespace

cudafx_status
qz_map_constants (cudaStream_t stream, const quantize_palette *pal)
{
  return upload_palette (stream, pal, &c_centre, &c_pal_u8, &c_pal_f32);
}

cudafx_status
qz_label_colours (const quantize_session *q, int k)
{
  label_colours_kernel<<<grid_for ((size_t) q->colours, THREADS), THREADS, 0, q->cx->stream>>> (
    q->d_colour[0], q->d_colour[1], q->d_colour[2], q->d_keys, q->colours, q->dims, k, q->d_bins);
  return cfx_check_launch (FILTER, "label_colours_kernel");
}

cudafx_status
qz_map (const quantize_session *q, const stripe_view &v, int k)
{
  if (q->table_map)
    map_table_kernel<<<grid_for (v.n, THREADS), THREADS, 0, q->cx->stream>>> (v, q->d_bins, q->d_dst, q->pitch);
  else
    map_kernel<<<grid_for (v.n, THREADS), THREADS, 0, q->cx->stream>>> (v, k, q->d_dst, q->pitch);
  return cfx_check_launch (FILTER, "map_kernel");
}
