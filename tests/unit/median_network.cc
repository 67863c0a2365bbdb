/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Exhaustive check of the GPU median's selection networks
 * (cuda/median_network.h) on the host, by the 0/1 principle: min/max
 * networks commute with thresholding, and thresholding keeps sorted columns
 * sorted, so a network that finds the rank-RANK key of every 0/1 input whose
 * columns are sorted finds it for all inputs. Every count of ones per column
 * is tried with every own row (two-row networks), 64 own rows a word, min and
 * max as AND and OR. Prints "N passed, N failed" like the unit tests. */
#include "../../cuda/median_network.h"

#include <cstdint>
#include <cstdio>
#include <utility>

namespace {

int passed, failed;

template <int L, int RANK, int STEP>
void
check ()
{
  static constexpr median_network::select_network<L, RANK, STEP> net{};
  constexpr int H = L - STEP + 1, N = H * L, OWN = STEP == 2 ? L : 0;
  constexpr int PATTERNS = 1 << OWN, WORDS = (PATTERNS + 63) / 64;
  long configs = 1, wrong = 0;
  for (int c = 0; c < L; c++)
    configs *= H + 1;
  for (long config = 0; config < configs; config++)
    {
      int ones_in_columns[L] = {}, ones = 0;
      for (long x = config, c = 0; c < L; c++, x /= H + 1)
        ones += ones_in_columns[c] = x % (H + 1);
      for (int w = 0; w < STEP; w++)
        for (int word = 0; word < WORDS; word++)
          {
            uint64_t v[median_network::MAX_KEYS] = {}, want = 0, valid = 0;
            for (int c = 0; c < L; c++)
              for (int i = H - ones_in_columns[c]; i < H; i++)
                v[c * H + i] = ~0ull;
            for (int bit = 0; bit < 64 && word * 64 + bit < PATTERNS; bit++)
              {
                int own = word * 64 + bit;
                for (int c = 0; c < OWN; c++)
                  {
                    v[N + w * L + c] |= (uint64_t) (own >> c & 1) << bit;
                    /* the other window's own row, which must not matter */
                    v[N + (1 - w) * L + c] |= (uint64_t) ((config * 7 + own) >> c & 1) << bit;
                  }
                /* The rank-RANK key is 1 iff at most RANK keys are 0. */
                int zeros = L * L - ones - __builtin_popcount (own);
                want |= (uint64_t) (zeros <= RANK) << bit;
                valid |= 1ull << bit;
              }
            for (int k = 0; k < net.count; k++)
              {
                uint64_t x = v[net.a[k]], y = v[net.b[k]];
                if (net.min_to_a[k])
                  v[net.a[k]] = x & y;
                if (net.max_to_b[k])
                  v[net.b[k]] = x | y;
              }
            wrong += __builtin_popcountll ((v[net.answer[w]] ^ want) & valid);
          }
    }
  int ops = 0;
  for (int k = 0; k < net.count; k++)
    ops += net.min_to_a[k] + net.max_to_b[k];
  bool ok = wrong == 0;
  printf ("%s %dx%d rank %d, %d row%s a step: %d min/max, %ld wrong outputs of all 0/1 inputs\n",
          ok ? "ok  " : "FAIL", L, L, RANK, STEP, STEP == 2 ? "s" : "", ops, wrong);
  (ok ? passed : failed)++;
}

template <int STEP, int... RANK>
void
check_ranks_3x3 (std::integer_sequence<int, RANK...>)
{
  (check<3, RANK, STEP> (), ...);
}

} // namespace

int
main ()
{
  /* What median_columns_kernel builds, with one and with two rows a step:
   * every rank of 3x3, the median of 5x5 and 7x7. */
  check_ranks_3x3<1> (std::make_integer_sequence<int, 9> ());
  check_ranks_3x3<2> (std::make_integer_sequence<int, 9> ());
  check<5, 12, 1> ();
  check<5, 12, 2> ();
  check<7, 24, 1> ();
  check<7, 24, 2> ();
  printf ("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
