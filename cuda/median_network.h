/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Comparator networks for the GPU median, built at compile time (plain
 * C++17 constexpr, so a host program can check them exhaustively).
 *
 * A network is a list of comparators (a, b): afterwards slot a holds the
 * minimum and slot b the maximum of the two. Built from Batcher's odd-even
 * merge, which works for lists of any lengths:
 * - sort_network<N>: sorts N keys (merge sort of halves); the i-th smallest
 *   ends in slot order[i].
 * - select_network<L, RANK, STEP>: the rank-RANK key of STEP (1 or 2)
 *   vertically adjacent L x L windows from their sorted columns (and, for
 *   two windows, the sorted columns of their L-1 shared rows plus each
 *   window's own row): min/max halves pruned backwards from the answers. */
#ifndef CUDAFX_MEDIAN_NETWORK_H
#define CUDAFX_MEDIAN_NETWORK_H

namespace median_network {

constexpr int MAX_KEYS = 64;
constexpr int MAX_COMPARATORS = 1024;

struct comparator_list
{
  int count = 0;
  unsigned char a[MAX_COMPARATORS] = {}, b[MAX_COMPARATORS] = {};
  constexpr void add (int lo, int hi)
  {
    a[count] = (unsigned char) lo;
    b[count] = (unsigned char) hi;
    count++;
  }
};

/* Merges sorted slot lists x (nx) and y (ny) into out (nx + ny slots, in
 * ascending order of their keys after the added comparators run). */
constexpr void
merge (const int *x, int nx, const int *y, int ny, int *out, comparator_list &net)
{
  if (nx == 0 || ny == 0)
    {
      for (int i = 0; i < nx; i++)
        out[i] = x[i];
      for (int i = 0; i < ny; i++)
        out[i] = y[i];
      return;
    }
  if (nx == 1 && ny == 1)
    {
      net.add (x[0], y[0]);
      out[0] = x[0];
      out[1] = y[0];
      return;
    }
  int xe[MAX_KEYS] = {}, xo[MAX_KEYS] = {}, ye[MAX_KEYS] = {}, yo[MAX_KEYS] = {};
  for (int i = 0; i < nx; i++)
    (i % 2 ? xo : xe)[i / 2] = x[i];
  for (int i = 0; i < ny; i++)
    (i % 2 ? yo : ye)[i / 2] = y[i];
  int even[MAX_KEYS] = {}, odd[MAX_KEYS] = {};
  int ne = (nx + 1) / 2 + (ny + 1) / 2, no = nx / 2 + ny / 2;
  merge (xe, (nx + 1) / 2, ye, (ny + 1) / 2, even, net);
  merge (xo, nx / 2, yo, ny / 2, odd, net);
  /* even[0], then odd[k] against even[k + 1]; leftovers keep their place */
  int n = 0;
  out[n++] = even[0];
  for (int k = 0; k < no || k + 1 < ne; k++)
    if (k < no && k + 1 < ne)
      {
        net.add (odd[k], even[k + 1]);
        out[n++] = odd[k];
        out[n++] = even[k + 1];
      }
    else
      out[n++] = k < no ? odd[k] : even[k + 1];
}

constexpr void
sort (const int *slots, int n, int *out, comparator_list &net)
{
  if (n <= 1)
    {
      if (n == 1)
        out[0] = slots[0];
      return;
    }
  int lo[MAX_KEYS] = {}, hi[MAX_KEYS] = {};
  sort (slots, n / 2, lo, net);
  sort (slots + n / 2, n - n / 2, hi, net);
  merge (lo, n / 2, hi, n - n / 2, out, net);
}

/* After the network, slot order[i] holds the i-th smallest key. */
template <int N> struct sort_network
{
  comparator_list net;
  int order[MAX_KEYS] = {};
  constexpr sort_network ()
  {
    int slots[MAX_KEYS] = {};
    for (int i = 0; i < N; i++)
      slots[i] = i;
    sort (slots, N, order, net);
  }
};

/* Selection of the rank-RANK key of STEP vertically adjacent L x L windows
 * (STEP 1 or 2), pruned to min/max halves: operation k puts the minimum of
 * slots a[k], b[k] into a[k] if min_to_a[k], their maximum into b[k] if
 * max_to_b[k]; the answers end in slots answer[0 .. STEP-1].
 * - STEP 1: the L sorted columns of one window in slots c*L .. c*L+L-1.
 *   Each rank-row is sorted across the columns (the columns stay sorted),
 *   the keys that the row and column order put surely below or above rank
 *   RANK are dropped, the rows' remaining sorted runs are merged.
 * - STEP 2: the windows' L-1 shared rows as L sorted columns of H = L-1 keys
 *   (slots c*H .. c*H+H-1), then each window's own row, unsorted: the upper
 *   window's in slots H*L .. H*L+L-1, the lower's in the next L. The shared
 *   grid, as above, yields its ranks RANK-L .. RANK in order (the only ones
 *   that can be the answer after L more keys); each window sorts its own row
 *   and takes its rank among those candidates and its row:
 *   the k-th of sorted lists C and T is min over i of max (C[i-1], T[k-i]).
 * Everything is then pruned backwards from the answers. */
template <int L, int RANK, int STEP = 1> struct select_network
{
  static constexpr int H = L - STEP + 1; /* rows of the shared grid */
  static_assert ((STEP == 1 || STEP == 2) && H * L + (STEP - 1) * 2 * L <= MAX_KEYS
                   && RANK >= 0 && RANK < L * L, "window too large");
  int count = 0, answer[STEP] = {};
  unsigned char a[MAX_COMPARATORS] = {}, b[MAX_COMPARATORS] = {};
  bool min_to_a[MAX_COMPARATORS] = {}, max_to_b[MAX_COMPARATORS] = {};

  constexpr void add (int x, int y, bool lo, bool hi)
  {
    a[count] = (unsigned char) x;
    b[count] = (unsigned char) y;
    min_to_a[count] = lo;
    max_to_b[count] = hi;
    count++;
  }

  constexpr select_network ()
  {
    constexpr int N = H * L;
    /* Ranks of the shared grid that can be an answer. */
    constexpr int lo = STEP == 1 ? RANK : (RANK - L > 0 ? RANK - L : 0);
    constexpr int hi = RANK < N - 1 ? RANK : N - 1;
    comparator_list net;
    /* Rank-row i of column c is slot c*H + i; grid[i][j]: j-th of row i. */
    int grid[L][L] = {};
    for (int i = 0; i < H; i++)
      {
        int row[MAX_KEYS] = {};
        for (int c = 0; c < L; c++)
          row[c] = c * H + i;
        sort (row, L, grid[i], net);
      }
    /* With rows and columns sorted, grid[i][j] has (i+1)(j+1) keys <= it and
     * (H-i)(L-j) keys >= it. */
    int runs[L][MAX_KEYS] = {}, run_len[L] = {}, n_runs = 0, below = 0;
    for (int i = 0; i < H; i++)
      {
        int n = 0;
        for (int j = 0; j < L; j++)
          if ((i + 1) * (j + 1) > hi + 1)
            continue; /* surely above */
          else if ((H - i) * (L - j) > N - lo)
            below++;
          else
            runs[n_runs][n++] = grid[i][j];
        if (n)
          run_len[n_runs++] = n;
      }
    /* Merge the two shortest runs until one is left. */
    while (n_runs > 1)
      {
        int s0 = 0, s1 = 1;
        if (run_len[s1] < run_len[s0])
          s0 = 1, s1 = 0;
        for (int r = 2; r < n_runs; r++)
          if (run_len[r] < run_len[s0])
            s1 = s0, s0 = r;
          else if (run_len[r] < run_len[s1])
            s1 = r;
        int merged[MAX_KEYS] = {};
        merge (runs[s0], run_len[s0], runs[s1], run_len[s1], merged, net);
        int len = run_len[s0] + run_len[s1];
        int keep = s0 < s1 ? s0 : s1, drop = s0 < s1 ? s1 : s0;
        for (int k = 0; k < len; k++)
          runs[keep][k] = merged[k];
        run_len[keep] = len;
        for (int r = drop; r + 1 < n_runs; r++)
          {
            run_len[r] = run_len[r + 1];
            for (int k = 0; k < run_len[r]; k++)
              runs[r][k] = runs[r + 1][k];
          }
        n_runs--;
      }
    /* The whole network, min/max halves: the grid's comparators, then each
     * window's own row (STEP 2). */
    select_network &all = *this;
    for (int k = 0; k < net.count; k++)
      all.add (net.a[k], net.b[k], true, true);
    const int *candidates = runs[0] + (lo - below);
    if (STEP == 1)
      answer[0] = candidates[0];
    for (int w = 0; STEP == 2 && w < STEP; w++)
      {
        int own[MAX_KEYS] = {}, t[MAX_KEYS] = {};
        for (int c = 0; c < L; c++)
          own[c] = N + w * L + c;
        comparator_list row_net;
        sort (own, L, t, row_net);
        for (int k = 0; k < row_net.count; k++)
          all.add (row_net.a[k], row_net.b[k], true, true);
        /* k-th of candidates (hi - lo + 1) and t (L): terms i with 0 <= k-i < L
         * are max (C[i-1], T[k-i]) into the T slot (T[k] alone for i = 0), the
         * last, i = k + 1, is C[k] alone if there is one. Minimum into the
         * first term's slot: the shared candidates are only read. */
        int k = RANK - lo, nc = hi - lo + 1, first = -1;
        for (int i = 0; i <= k + 1 && i <= nc; i++)
          {
            int slot = 0;
            if (k - i >= L)
              continue;
            if (k - i < 0)
              slot = candidates[k];
            else
              {
                slot = t[k - i];
                if (i > 0)
                  all.add (candidates[i - 1], slot, false, true);
              }
            if (first < 0)
              first = slot;
            else
              all.add (first, slot, true, false);
          }
        answer[w] = first;
      }
    /* Backwards from the answers: keep what some needed slot depends on. */
    bool needed[MAX_KEYS] = {};
    for (int w = 0; w < STEP; w++)
      needed[answer[w]] = true;
    int n = 0;
    for (int k = count - 1; k >= 0; k--)
      {
        bool lo_kept = min_to_a[k] && needed[a[k]], hi_kept = max_to_b[k] && needed[b[k]];
        if (!lo_kept && !hi_kept)
          continue;
        /* kept entries collect at the end, in order */
        int to = count - 1 - n;
        a[to] = a[k];
        b[to] = b[k];
        min_to_a[to] = lo_kept;
        max_to_b[to] = hi_kept;
        needed[a[k]] = needed[b[k]] = true;
        n++;
      }
    for (int k = 0; k < n; k++)
      {
        a[k] = a[count - n + k];
        b[k] = b[count - n + k];
        min_to_a[k] = min_to_a[count - n + k];
        max_to_b[k] = max_to_b[count - n + k];
      }
    count = n;
  }
};

} // namespace median_network

#endif /* CUDAFX_MEDIAN_NETWORK_H */
