/* Comparator networks for the GPU median, built at compile time (plain
 * C++17 constexpr, so a host program can check them exhaustively).
 *
 * A network is a list of comparators (a, b): afterwards slot a holds the
 * minimum and slot b the maximum of the two. Built from Batcher's odd-even
 * merge, which works for lists of any lengths:
 * - sort_network<N>: sorts N keys (merge sort of halves); the i-th smallest
 *   ends in slot order[i].
 * - select_network<L, RANK>: the rank-RANK key of an L x L window whose L
 *   columns (slots c*L .. c*L+L-1) arrive sorted ascending. It sorts each
 *   rank-row across the columns (the columns stay sorted), drops the keys
 *   that the row and column order put surely below or above rank RANK, merges
 *   the rows' remaining sorted runs, and keeps, walking backwards from the
 *   answer's slot, only the comparators and the min/max halves it needs. */
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

/* An operation of a pruned network: min into a and/or max into b. */
template <int L, int RANK> struct select_network
{
  static_assert (L * L <= MAX_KEYS && RANK >= 0 && RANK < L * L, "window too large");
  int count = 0, answer = 0;
  unsigned char a[MAX_COMPARATORS] = {}, b[MAX_COMPARATORS] = {};
  bool min_to_a[MAX_COMPARATORS] = {}, max_to_b[MAX_COMPARATORS] = {};

  constexpr select_network ()
  {
    constexpr int N = L * L;
    comparator_list net;
    /* Rank-row i of column c is slot c*L + i; grid[i][j]: j-th of row i. */
    int grid[L][L] = {};
    for (int i = 0; i < L; i++)
      {
        int row[MAX_KEYS] = {};
        for (int c = 0; c < L; c++)
          row[c] = c * L + i;
        sort (row, L, grid[i], net);
      }
    /* With rows and columns sorted, grid[i][j] has (i+1)(j+1) keys <= it and
     * (L-i)(L-j) keys >= it. */
    int runs[L][MAX_KEYS] = {}, run_len[L] = {}, n_runs = 0, below = 0;
    for (int i = 0; i < L; i++)
      {
        int n = 0;
        for (int j = 0; j < L; j++)
          if ((i + 1) * (j + 1) > RANK + 1)
            continue; /* surely above */
          else if ((L - i) * (L - j) > N - RANK)
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
    answer = runs[0][RANK - below];
    /* Backwards from the answer: keep what some needed slot depends on. */
    bool needed[MAX_KEYS] = {};
    needed[answer] = true;
    int kept[MAX_COMPARATORS] = {};
    bool lo_kept[MAX_COMPARATORS] = {}, hi_kept[MAX_COMPARATORS] = {};
    int n = 0;
    for (int k = net.count - 1; k >= 0; k--)
      {
        int x = net.a[k], y = net.b[k];
        if (!needed[x] && !needed[y])
          continue;
        kept[n] = k;
        lo_kept[n] = needed[x];
        hi_kept[n] = needed[y];
        n++;
        needed[x] = needed[y] = true;
      }
    for (int k = 0; k < n; k++)
      {
        int from = n - 1 - k;
        a[k] = net.a[kept[from]];
        b[k] = net.b[kept[from]];
        min_to_a[k] = lo_kept[from];
        max_to_b[k] = hi_kept[from];
      }
    count = n;
  }
};

} // namespace median_network

#endif /* CUDAFX_MEDIAN_NETWORK_H */
