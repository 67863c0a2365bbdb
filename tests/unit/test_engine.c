/* Engine plumbing: image validation, the argument table, dispatch, progress. */
#include "harness.h"

#include <string.h>

TEST (engine_table_has_every_filter)
{
  const char *names[] = { "median", "nl-means", "quantize", "convolve" };
  for (int i = 0; i < 4; i++)
    {
      const cudafx_filter_desc *f = cudafx_filter_find (names[i]);
      CHECK (f != NULL, "filter %s missing", names[i]);
      if (!f)
        continue;
      CHECK (cudafx_filter_find (f->procedure) == f, "procedure name of %s not found", names[i]);
      const cudafx_arg *b = cudafx_arg_find (f, "backend");
      CHECK (b && b->type == CUDAFX_ARG_CHOICE && b->n_choices == 3, "%s lacks backend", names[i]);
      for (int a = 0; a < f->n_args; a++)
        CHECK ((f->args[a].min <= f->args[a].def && f->args[a].def <= f->args[a].max)
               || f->args[a].type == CUDAFX_ARG_DOUBLE_ARRAY,
               "%s %s default outside its range", names[i], f->args[a].name);
    }
  CHECK (cudafx_filter_find ("nope") == NULL, "unknown filter found");
}

/* In a dialog, Alt+letter activates the label's control: two labels with one
 * letter only move the focus between them, and a label taking the letter of
 * the dialog's buttons (_Help, _Cancel, _OK) stops Alt+O from pressing OK. */
TEST (engine_table_mnemonics_are_unique_per_dialog)
{
  for (int f = 0; f < CUDAFX_N_FILTERS; f++)
    {
      char used[256] = { 0 };
      used['h'] = used['c'] = used['o'] = 1;
      for (int a = 0; a < cudafx_filters[f].n_args; a++)
        {
          const char *label = cudafx_filters[f].args[a].label;
          const char *mark = strchr (label, '_');
          CHECK (mark && mark[1], "%s %s: label \"%s\" has no mnemonic",
                 cudafx_filters[f].name, cudafx_filters[f].args[a].name, label);
          if (!mark || !mark[1])
            continue;
          unsigned char key = (unsigned char) (mark[1] | 0x20);
          CHECK (!used[key], "%s %s: mnemonic '%c' of \"%s\" is taken", cudafx_filters[f].name,
                 cudafx_filters[f].args[a].name, key, label);
          used[key] = 1;
        }
    }
}

TEST (engine_defaults_follow_the_table)
{
  cudafx_median_params m;
  cudafx_median_params_init (&m);
  CHECK (m.radius == 3 && m.percentile == 50 && m.shape == CUDAFX_SHAPE_SQUARE, "median defaults");
  cudafx_nlmeans_params n;
  cudafx_nlmeans_params_init (&n);
  CHECK (n.automatic == 1 && n.h == 10 && n.patch_radius == 1 && n.search_radius == 10, "nl-means defaults");
  cudafx_quantize_params q;
  cudafx_quantize_params_init (&q);
  CHECK (q.colors == 16 && q.dither == CUDAFX_DITHER_NONE && q.seed == 0, "quantize defaults");
  cudafx_convolve_params c;
  cudafx_convolve_params_init (&c);
  CHECK (c.preset == CUDAFX_PRESET_GAUSSIAN && c.sigma == 2 && c.divisor == 0 &&
         c.border == CUDAFX_BORDER_CLAMP, "convolve defaults");
}
