/* SPDX-License-Identifier: GPL-3.0-or-later */
/* The CLI's --json lines (json.h): the run's backend and times, and what
 * each filter found (nl-means' and nl-bayes' parameters and noise model,
 * quantize's palette). */
#include "json.h"

#include <glib.h>

#include <stdio.h>
#include <string.h>

void
cli_json_string (const char *s)
{
  if (!s)
    {
      fputs ("null", stdout);
      return;
    }
  putchar ('"');
  while (*s)
    {
      unsigned char ch = (unsigned char) *s;
      if (ch >= 0x80)
        {
          const gchar *end;
          if (g_utf8_validate (s, -1, &end))
            end = s + strlen (s);
          if (end == s)
            {
              fputs ("\\ufffd", stdout);
              s++;
            }
          else
            {
              /* The valid run up to the next ASCII byte. */
              const char *p = s;
              while (p < end && (unsigned char) *p >= 0x80)
                p++;
              fwrite (s, 1, (size_t) (p - s), stdout);
              s = p;
            }
          continue;
        }
      if (ch == '"' || ch == '\\')
        printf ("\\%c", ch);
      else if (ch < 0x20)
        printf ("\\u%04x", ch);
      else
        putchar (ch);
      s++;
    }
  putchar ('"');
}


/* The noise model automatic nl-means or nl-bayes found (manual nl-bayes: the
 * sigma given, flat): "noise_model": {"kind": "flat"}
 * or the signal-dependent one, its variance a x + b per colour channel (x the
 * linear-light value 0..1) and the sigma it gives shadows and highlights;
 * for both, whether the noise looks correlated, its mean correlation with
 * the 4 nearest neighbours, with all 8 (rows dy = -1, 0, 1 of dx = -1, 0, 1)
 * and between the colour channels. */
static void
print_noise_model (double sigma, const cudafx_noise_model *m, double stabilised_sigma)
{
  if (!m->signal_dependent)
    printf (", \"noise_model\": {\"kind\": \"flat\", \"sigma\": %.6g", sigma);
  else
    {
      printf (", \"noise_model\": {\"kind\": \"signal-dependent\", \"a\": [");
      for (int c = 0; c < m->channels; c++)
        printf ("%s%.6g", c ? ", " : "", m->a[c]);
      printf ("], \"b\": [");
      for (int c = 0; c < m->channels; c++)
        printf ("%s%.6g", c ? ", " : "", m->b[c]);
      printf ("], \"sigma_shadows\": %.6g, \"sigma_highlights\": %.6g, \"stabilised_sigma\": %.6g",
              m->sigma_dark, m->sigma_light, stabilised_sigma);
    }
  printf (", \"correlated\": %s, \"correlation\": %.4f, \"spatial_correlation\": [",
          m->correlated ? "true" : "false", m->correlation);
  for (int y = 0; y < 3; y++)
    printf ("%s[%.4f, %.4f, %.4f]", y ? ", " : "", m->spatial_corr[y][0], m->spatial_corr[y][1],
            m->spatial_corr[y][2]);
  printf ("], \"channel_correlation\": %.4f}", m->channel_corr);
}

/* nl-bayes' steps: "patch_size": [step 1, step 2], and so on. */
static void
print_nlbayes (const cli_command *c, const cudafx_nlbayes_info *info)
{
  printf (", \"auto\": %s, \"sigma\": %.6g, \"flat_area\": %s, \"patch_size\": [%d, %d], "
          "\"group_size\": [%d, %d], \"search_size\": [%d, %d]",
          cli_arg_value (c, "auto") ? "true" : "false", info->sigma, info->flat_area ? "true" : "false",
          info->patch_size[0], info->patch_size[1], info->group_size[0], info->group_size[1],
          info->search_size[0], info->search_size[1]);
}

void
cli_json_file (const cli_command *c, const cli_file *f)
{
  const cudafx_run_result *r = f->result;
  printf ("{\"input\": ");
  cli_json_string (f->in);
  printf (", \"output\": ");
  cli_json_string (f->out);
  if (f->error[0])
    {
      printf (", \"error\": ");
      cli_json_string (f->error);
      printf ("}\n");
      return;
    }
  printf (", \"filter\": ");
  cli_json_string (c->filter->name);
  printf (", \"backend\": \"%s\", \"backend_reason\": ",
          r->report.backend_used == CUDAFX_BACKEND_CUDA ? "cuda" : "cpu");
  cli_json_string (f->why);
  printf (", \"device\": ");
  cli_json_string (r->report.device);
  printf (", \"threads\": %d, \"width\": %d, \"height\": %d, \"ms\": %.3f, \"kernel_ms\": %.3f, "
          "\"transfer_ms\": %.3f", r->report.threads_used, f->pic.image.width, f->pic.image.height, f->ms,
          r->report.kernel_ms, r->report.transfer_ms);
  if (r->report.fallback[0] && cli_arg_value (c, "backend") == CUDAFX_BACKEND_AUTO)
    {
      printf (", \"fallback\": ");
      cli_json_string (r->report.fallback);
    }
  if (c->filter_index == CUDAFX_FILTER_NLMEANS)
    printf (", \"auto\": %s, \"sigma\": %.6g, \"h\": %.6g, \"patch_radius\": %d, \"search_radius\": %d"
            ", \"patch_sigma\": %.6g, \"centre_weight\": \"%s\"",
            cli_arg_value (c, "auto") ? "true" : "false", r->nlmeans.sigma, r->nlmeans.h,
            r->nlmeans.patch_radius, r->nlmeans.search_radius, r->nlmeans.patch_sigma,
            r->nlmeans.centre_max ? "max" : "1");
  if (c->filter_index == CUDAFX_FILTER_NLMEANS)
    print_noise_model (r->nlmeans.sigma, &r->nlmeans.noise, r->nlmeans.stabilised_sigma);
  if (c->filter_index == CUDAFX_FILTER_NLBAYES)
    {
      print_nlbayes (c, &r->nlbayes);
      print_noise_model (r->nlbayes.sigma, &r->nlbayes.noise, r->nlbayes.stabilised_sigma);
    }
  if (c->filter_index == CUDAFX_FILTER_QUANTIZE)
    {
      const cudafx_palette *p = &r->palette;
      printf (", \"colors\": %d, \"iterations\": %d, \"palette\": [", p->colors, p->iterations);
      for (int i = 0; i < p->colors; i++)
        {
          const double *e = p->entries[i];
          int grey = p->channels == 1;
          printf ("%s[%.6g, %.6g, %.6g]", i ? ", " : "", e[0], e[grey ? 0 : 1], e[grey ? 0 : 2]);
        }
      putchar (']');
    }
  printf ("}\n");
  fflush (stdout); /* a line per file as it finishes, for whoever reads the pipe */
}
