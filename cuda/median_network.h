/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Comparator networks for the GPU median, built at compile time (plain
 * C++17 constexpr, so a host program can check them exhaustively).
 *
 * A network is a list of comparators (a, b): afterwards slot a holds the
 * minimum and slot b the maximum of the two. Built from Batcher's odd-even
 * merge, which works for lists of any lengths:
 * - sort_network<N>: sorts N keys (merge sort of halves); the i-th smallest
 *   ends in slot order[i].
 * - select_network<L, RANK>: the rank-RANK key of an L x L window from its
 *   sorted columns;
 * - tile_network<L, RANK>: the rank-RANK keys of a 2x2 tile of L x L
 *   windows from the sorted columns of their shared rows and each window's
 *   own row (Adams 2021, "Fast median filters using separable sorting
 *   networks", 2-D tiles);
 * both as min/max halves pruned backwards from the answers. */
#ifndef CUDAFX_MEDIAN_NETWORK_H
#define CUDAFX_MEDIAN_NETWORK_H

namespace median_network {

constexpr int MAX_KEYS = 64;
constexpr int MAX_COMPARATORS = 1024;
constexpr int MAX_SLOTS = 256;

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

/* Min/max halves over numbered slots, with copies: operation k puts the
 * minimum of slots a[k], b[k] into a[k] if min_to_a[k], their maximum into
 * b[k] if max_to_b[k]; if copy[k], it copies slot a[k] into b[k]. */
struct half_network
{
  int count = 0;
  unsigned char a[MAX_COMPARATORS] = {}, b[MAX_COMPARATORS] = {};
  bool min_to_a[MAX_COMPARATORS] = {}, max_to_b[MAX_COMPARATORS] = {}, copy[MAX_COMPARATORS] = {};

  constexpr void add (int x, int y, bool lo, bool hi, bool cp = false)
  {
    a[count] = (unsigned char) x;
    b[count] = (unsigned char) y;
    min_to_a[count] = lo;
    max_to_b[count] = hi;
    copy[count] = cp;
    count++;
  }
  constexpr void append (const comparator_list &net)
  {
    for (int k = 0; k < net.count; k++)
      add (net.a[k], net.b[k], true, true);
  }
  /* Backwards from the answers: keep what some needed slot depends on. */
  constexpr void prune (const int *answers, int n_answers)
  {
    bool needed[MAX_SLOTS] = {};
    for (int w = 0; w < n_answers; w++)
      needed[answers[w]] = true;
    int n = 0;
    for (int k = count - 1; k >= 0; k--)
      {
        bool lo_kept = false, hi_kept = false, cp = copy[k];
        if (cp)
          {
            if (!needed[b[k]])
              continue;
            needed[b[k]] = false; /* written here, not read */
            needed[a[k]] = true;
          }
        else
          {
            lo_kept = min_to_a[k] && needed[a[k]];
            hi_kept = max_to_b[k] && needed[b[k]];
            if (!lo_kept && !hi_kept)
              continue;
            needed[a[k]] = needed[b[k]] = true;
          }
        /* kept entries collect at the end, in order */
        int to = count - 1 - n;
        a[to] = a[k];
        b[to] = b[k];
        min_to_a[to] = lo_kept;
        max_to_b[to] = hi_kept;
        copy[to] = cp;
        n++;
      }
    for (int k = 0; k < n; k++)
      {
        a[k] = a[count - n + k];
        b[k] = b[count - n + k];
        min_to_a[k] = min_to_a[count - n + k];
        max_to_b[k] = max_to_b[count - n + k];
        copy[k] = copy[count - n + k];
      }
    count = n;
  }
};

/* Ranks lo .. hi of a grid of `cols` sorted columns of `rows` keys (slot of
 * column c, rank k: slots[c * rows + k]) into out[0 .. hi - lo], sorted:
 * each rank-row is sorted across the columns (the columns stay sorted), the
 * keys that the row and column order put surely below or above the ranks
 * are dropped, the rows' remaining sorted runs are merged. */
constexpr void
grid_candidates (const int *slots, int rows, int cols, int lo, int hi, comparator_list &net, int *out)
{
  const int n_keys = rows * cols;
  int runs[MAX_KEYS][MAX_KEYS] = {}, run_len[MAX_KEYS] = {}, n_runs = 0, below = 0;
  for (int i = 0; i < rows; i++)
    {
      int row[MAX_KEYS] = {}, sorted[MAX_KEYS] = {};
      for (int c = 0; c < cols; c++)
        row[c] = slots[c * rows + i];
      sort (row, cols, sorted, net);
      /* With rows and columns sorted, sorted[j] of row i has (i+1)(j+1)
       * keys <= it and (rows-i)(cols-j) keys >= it. */
      int n = 0;
      for (int j = 0; j < cols; j++)
        if ((i + 1) * (j + 1) > hi + 1)
          continue; /* surely above */
        else if ((rows - i) * (cols - j) > n_keys - lo)
          below++;
        else
          runs[n_runs][n++] = sorted[j];
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
  for (int k = 0; k <= hi - lo; k++)
    out[k] = runs[0][lo - below + k];
}

/* Selection of the rank-RANK key of one L x L window from its L sorted
 * columns (slots c*L .. c*L+L-1) by grid_candidates, pruned to min/max
 * halves; the answer ends in slot answer[0]. */
template <int L, int RANK> struct select_network : half_network
{
  static_assert (L * L <= MAX_KEYS && RANK >= 0 && RANK < L * L, "window too large");
  int answer[1] = {};

  constexpr select_network ()
  {
    comparator_list net;
    int grid[MAX_KEYS] = {};
    for (int k = 0; k < L * L; k++)
      grid[k] = k;
    grid_candidates (grid, L, L, RANK, RANK, net, answer);
    append (net);
    prune (answer, 1);
  }
};

/* The rank-RANK keys of a 2x2 tile of L x L windows (Adams 2021's 2-D
 * tiles): outputs (Y0, X0), (Y0, X1 = X0 + 1), (Y1 = Y0 + 1, X0), (Y1, X1).
 * Input slots, with H = L - 1 and R = L / 2:
 * - the core, the H x H keys all four windows share (rows Y0-R+1 .. Y0+R,
 *   columns X0-R+1 .. X0+R): column c's keys sorted, rank k in c * H + k;
 * - LEFT + k, RIGHT + k: columns X0-R and X1+R over the same rows, sorted;
 * - UPPER + j, LOWER + j (j = 0 .. L): rows Y0-R and Y1+R, columns X0-R+j,
 *   as loaded.
 * The core yields its ranks RANK-2L+1 .. RANK (the only ones that can be an
 * answer after 2L-1 more keys of a window); each tile column merges its own
 * sorted column into them once for both rows (ranks RANK-L .. RANK left);
 * each tile row sorts its H shared keys once for both columns, each output
 * merges in its corner key and takes its rank among its column's candidates
 * and that row: the k-th of sorted lists C and T is min over i of
 * max (C[i-1], T[k-i]). Merging ranks lo .. hi of a set with a whole sorted
 * list T of n keys gives the union's ranks lo+n .. hi exactly. Lists used
 * by two outputs are copied before a merge changes them in place (copies
 * are free: registers renamed); everything is pruned backwards from the
 * answers[4] (upper left, upper right, lower left, lower right). */
template <int L, int RANK> struct tile_network : half_network
{
  static constexpr int H = L - 1, CORE = H * H, LEFT = CORE, RIGHT = LEFT + H, UPPER = RIGHT + H,
                       LOWER = UPPER + L + 1, INPUTS = LOWER + L + 1;
  static_assert (L >= 3 && RANK >= 0 && RANK < L * L && CORE <= MAX_KEYS, "window too large");
  int answer[4] = {}, slots = INPUTS;

  constexpr int fresh () { return slots++; }

  /* Copies of n slots into fresh ones. */
  constexpr void copy_list (const int *from, int n, int *to)
  {
    for (int k = 0; k < n; k++)
      {
        to[k] = fresh ();
        add (from[k], to[k], false, false, true);
      }
  }

  constexpr tile_network ()
  {
    comparator_list net;
    /* The core's candidates. */
    const int lo0 = RANK - (2 * L - 1) > 0 ? RANK - (2 * L - 1) : 0, hi0 = RANK < CORE - 1 ? RANK : CORE - 1;
    int core[MAX_KEYS] = {}, cand0[MAX_KEYS] = {};
    for (int k = 0; k < CORE; k++)
      core[k] = k;
    grid_candidates (core, H, H, lo0, hi0, net, cand0);
    append (net);
    /* Each tile column: its own sorted column merged in. */
    const int lo1 = RANK - L > 0 ? RANK - L : 0, hi1 = RANK < CORE + H - 1 ? RANK : CORE + H - 1;
    int cand1[2][MAX_KEYS] = {};
    for (int side = 0; side < 2; side++)
      {
        int c[MAX_KEYS] = {}, own[MAX_KEYS] = {}, merged[MAX_KEYS] = {};
        copy_list (cand0, hi0 - lo0 + 1, c);
        for (int k = 0; k < H; k++)
          own[k] = (side ? RIGHT : LEFT) + k;
        comparator_list m;
        merge (c, hi0 - lo0 + 1, own, H, merged, m);
        append (m);
        for (int k = 0; k <= hi1 - lo1; k++)
          cand1[side][k] = merged[lo1 - lo0 + k];
      }
    /* Each tile row: its H shared keys sorted, then each output's corner. */
    for (int row = 0; row < 2; row++)
      {
        const int base = row ? LOWER : UPPER;
        int shared[MAX_KEYS] = {}, sorted[MAX_KEYS] = {};
        for (int j = 0; j < H; j++)
          shared[j] = base + 1 + j;
        comparator_list s;
        sort (shared, H, sorted, s);
        append (s);
        for (int side = 0; side < 2; side++)
          {
            int t0[MAX_KEYS] = {}, corner[1] = { base + (side ? L : 0) }, t[MAX_KEYS] = {};
            copy_list (sorted, H, t0);
            comparator_list m;
            merge (corner, 1, t0, H, t, m);
            append (m);
            /* k-th of the candidates (hi1 - lo1 + 1) and t (L): terms i
             * with 0 <= k-i < L are max (C[i-1], T[k-i]) into the T slot
             * (T[k] alone for i = 0), the last, i = k + 1, is C[k] alone if
             * there is one. Minimum into the first term's slot: the
             * candidates are only read. */
            const int *cand = cand1[side];
            int k = RANK - lo1, nc = hi1 - lo1 + 1, first = -1;
            for (int i = 0; i <= k + 1 && i <= nc; i++)
              {
                int slot = 0;
                if (k - i >= L)
                  continue;
                if (k - i < 0)
                  slot = cand[k];
                else
                  {
                    slot = t[k - i];
                    if (i > 0)
                      add (cand[i - 1], slot, false, true);
                  }
                if (first < 0)
                  first = slot;
                else
                  add (first, slot, true, false);
              }
            answer[row * 2 + side] = first;
          }
      }
    prune (answer, 4);
  }
};

} // namespace median_network

#endif /* CUDAFX_MEDIAN_NETWORK_H */
