/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Check of the GPU median's selection networks (cuda/median_network.h) on
 * the host, by the 0/1 principle: min/max networks (and copies) commute
 * with thresholding, and thresholding keeps sorted columns sorted, so a
 * network that finds the rank-RANK key of every 0/1 input whose columns are
 * sorted finds it for all inputs. Min and max are AND and OR on 64 inputs a
 * word. The one-window networks (3x3, every rank) are checked for every
 * count of ones per column; the 2x2 tile networks for every count of ones
 * per column too, with every pair of own rows at 5x5 and 64 pairs of own
 * rows per column configuration at 7x7 (every pair would take hours).
 * Prints "N passed, N failed" like the unit tests. */
#include "../../cuda/median_network.h"

#include <cstdint>
#include <cstdio>
#include <utility>

namespace {

int passed, failed;

template <typename Net>
void
run (const Net &net, uint64_t *v)
{
  for (int k = 0; k < net.count; k++)
    {
      uint64_t x = v[net.a[k]], y = v[net.b[k]];
      if (net.copy[k])
        v[net.b[k]] = x;
      else
        {
          if (net.min_to_a[k])
            v[net.a[k]] = x & y;
          if (net.max_to_b[k])
            v[net.b[k]] = x | y;
        }
    }
}

template <typename Net>
int
min_max_count (const Net &net)
{
  int ops = 0;
  for (int k = 0; k < net.count; k++)
    ops += net.min_to_a[k] + net.max_to_b[k];
  return ops;
}

void
report (bool ok, const char *what, int l, int rank, int ops, long wrong, long inputs)
{
  printf ("%s %dx%d rank %d, %s: %d min/max, %ld wrong of %ld 0/1 inputs\n", ok ? "ok  " : "FAIL", l, l, rank, what,
          ops, wrong, inputs);
  (ok ? passed : failed)++;
}

template <int L, int RANK>
void
check_window ()
{
  static constexpr median_network::select_network<L, RANK> net{};
  long configs = 1, wrong = 0;
  for (int c = 0; c < L; c++)
    configs *= L + 1;
  for (long config = 0; config < configs; config++)
    {
      uint64_t v[median_network::MAX_SLOTS] = {};
      int ones = 0;
      for (long x = config, c = 0; c < L; c++, x /= L + 1)
        for (int i = L - x % (L + 1); i < L; i++, ones++)
          v[c * L + i] = 1;
      run (net, v);
      /* The rank-RANK key is 1 iff at most RANK keys are 0. */
      wrong += v[net.answer[0]] != (uint64_t) (L * L - ones <= RANK);
    }
  report (wrong == 0, "one window", L, RANK, min_max_count (net), wrong, configs);
}

/* 64 own-row pairs of a column configuration: all of them in turn (word
 * `word` of them) when the rows have few keys, else pseudo-random ones. */
template <int L, int RANK>
void
check_tile (bool every_row)
{
  using tile = median_network::tile_network<L, RANK>;
  static constexpr tile net{};
  constexpr int H = L - 1, COLUMNS = H + 2, ROW_BITS = 2 * (L + 1);
  long configs = 1, wrong = 0, inputs = 0;
  for (int c = 0; c < COLUMNS; c++)
    configs *= H + 1;
  const long words = every_row ? (1l << ROW_BITS) / 64 : 1;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (long config = 0; config < configs; config++)
    for (long word = 0; word < words; word++)
      {
        uint64_t v[net.slots] = {};
        /* ones[c]: ones in column c of the window rows Y0-R+1 .. Y0+R, c = 0
         * for column X0-R .. L for column X1+R; the column's top keys. */
        int ones[L + 1] = {};
        for (long x = config, c = 0; c < COLUMNS; c++, x /= H + 1)
          ones[c] = x % (H + 1);
        for (int c = 0; c <= L; c++)
          {
            const int base = c == 0 ? tile::LEFT : c == L ? tile::RIGHT : (c - 1) * H;
            for (int i = H - ones[c]; i < H; i++)
              v[base + i] = ~0ull;
          }
        uint64_t rows[64];
        for (int bit = 0; bit < 64; bit++)
          {
            if (every_row)
              rows[bit] = (uint64_t) (word * 64 + bit);
            else
              {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                rows[bit] = state >> (64 - ROW_BITS);
              }
            for (int j = 0; j <= L; j++)
              {
                v[tile::UPPER + j] |= (rows[bit] >> j & 1) << bit;
                v[tile::LOWER + j] |= (rows[bit] >> (L + 1 + j) & 1) << bit;
              }
          }
        run (net, v);
        for (int bit = 0; bit < 64; bit++)
          for (int q = 0; q < 4; q++)
            {
              const int row = q / 2, side = q % 2;
              int window_ones = __builtin_popcountll (rows[bit] >> (row * (L + 1) + side) & ((1ull << L) - 1));
              for (int c = side; c < side + L; c++)
                window_ones += ones[c];
              const uint64_t want = L * L - window_ones <= RANK;
              wrong += (v[net.answer[q]] >> bit & 1) != want;
            }
        inputs += 64;
      }
  report (wrong == 0, every_row ? "2x2 tile" : "2x2 tile, sampled own rows", L, RANK, min_max_count (net), wrong,
          inputs);
}

template <int... RANK>
void
check_ranks_3x3 (std::integer_sequence<int, RANK...>)
{
  (check_window<3, RANK> (), ...);
}

} // namespace

int
main ()
{
  /* What median_columns_kernel builds (every rank of 3x3) and what
   * median_tile_kernel builds (the median of 5x5 and 7x7). */
  check_ranks_3x3 (std::make_integer_sequence<int, 9> ());
  check_tile<5, 12> (true);
  check_tile<7, 24> (false);
  printf ("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
