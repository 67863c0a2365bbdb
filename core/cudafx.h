/* SPDX-License-Identifier: GPL-3.0-or-later */
/* cudafx — public engine API.
 *
 * The only header a host (GIMP 3, GIMP 2.10, the CLI, tests, benchmarks) includes.
 * Knows nothing of GIMP, GEGL or GTK: images are plain interleaved buffers.
 */
#ifndef CUDAFX_H
#define CUDAFX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDAFX_VERSION "0.1.0"

/* ---- status ------------------------------------------------------------ */

typedef enum {
  CUDAFX_OK = 0,
  CUDAFX_ERR_INVALID_ARG,   /* a parameter or image view is out of range */
  CUDAFX_ERR_NO_MEMORY,     /* host allocation failed or a size overflowed */
  CUDAFX_ERR_CANCELLED,     /* the progress callback asked to stop, or rows_needed failed */
  CUDAFX_ERR_CUDA_NOT_BUILT,/* backend cuda asked for, library built without it */
  CUDAFX_ERR_NO_DEVICE,     /* no usable CUDA driver or device */
  CUDAFX_ERR_CUDA           /* a CUDA call failed (out of memory, launch error) */
} cudafx_status;

/* Short description of a status ("invalid argument"). */
const char *cudafx_status_string (cudafx_status status);

/* Detailed message for the last failure on the calling thread, naming the
 * argument or the CUDA error, e.g. "median: radius 101 is out of range 1..100".
 * Never NULL; empty when the last call succeeded. */
const char *cudafx_error_message (void);

/* ---- test and benchmark switches ---------------------------------------- */

/* The value of a test, fault-injection or benchmark switch, an environment
 * variable no user needs (docs/TESTING.md, "Test and benchmark switches";
 * the user's own variables are in the README): NULL when it is not set. Every
 * switch the engine, the backends, the hosts and the test programs read goes
 * through here, and is named, with what it does, in the one table of
 * core/services.c; a name missing from it is a programming error, reported on
 * stderr before abort (), so that no switch is read under a misspelt name or
 * left out of the list. */
const char *cudafx_test_switch (const char *name);

/* ---- images ------------------------------------------------------------ */

typedef enum { CUDAFX_U8 = 0, CUDAFX_F32 = 1 } cudafx_type;

/* A view on interleaved pixels. f32 data is nominally 0..1 (values outside
 * are kept where a filter allows); u8 is 0..255. stride is bytes per row and
 * must be at least width * channels * element size; stride and data are
 * multiples of the element size (f32 rows start on a float boundary). */
typedef struct {
  void       *data;
  int         width;
  int         height;
  int         channels;  /* 1..4 */
  int         has_alpha; /* last channel is alpha (straight, not premultiplied) */
  cudafx_type type;
  size_t      stride;
} cudafx_image;

/* Bytes of one element of the type. */
size_t cudafx_type_size (cudafx_type type);

/* ---- options ------------------------------------------------------------- */

typedef enum {
  CUDAFX_BACKEND_AUTO = 0,
  CUDAFX_BACKEND_CPU  = 1,
  CUDAFX_BACKEND_CUDA = 2
} cudafx_backend;

/* Called from the calling thread between stripes with the fraction done
 * (0..1). Return nonzero to cancel: the call then returns CUDAFX_ERR_CANCELLED
 * and dst holds partial results that the host must discard. Other errors
 * leave dst untouched, except a CUDA failure with the backend forced to
 * CUDA after some stripes were written: dst then holds those stripes. */
typedef int (*cudafx_progress_fn) (double fraction, void *user_data);

/* Called from the calling thread when rows [y0, y1) of dst hold their final
 * values, so that a host can pass them on (a GEGL operation writes them into
 * its output buffer) while the rows below are still being computed: the CUDA
 * backend reports each stripe as it lands in dst, the CPU (whose rows finish
 * in no order) all rows at its end. Calls come in row order, each beginning
 * where the one before ended, from row 0; once the call has succeeded they
 * have covered every row. A call that falls back from CUDA to the CPU starts
 * again from row 0 with the CPU's values. Never called for a call without
 * dst (nl-means' estimate) nor after a failure. */
typedef void (*cudafx_rows_ready_fn) (int y0, int y1, void *user_data);

/* Called from the calling thread before the engine reads rows of src: rows
 * [0, y) of src must hold their values when it returns, so that a host can
 * fill src as it is asked (a GEGL operation reads its input stripe by stripe
 * while the GPU filters the stripes above). Calls come with y growing, never
 * beyond src's height, each before any row it covers is read. The rule
 * (cudafx_dispatch): the CUDA backend's stripe pipeline of median, convolve
 * and nl-means asks stripe by stripe for each stripe's rows with its halo,
 * and its quantize of a large u8 image without alpha in a few pieces; every
 * other reader (the CPU backend, quantize of other images, the wrap border,
 * a fallback to the CPU) asks for all rows before it starts. Return nonzero
 * when the rows cannot be had: the call then fails with
 * CUDAFX_ERR_CANCELLED and a message saying so, without falling back, and
 * dst holds partial results that the host must discard (rows_ready may
 * have reported some). */
typedef int (*cudafx_rows_needed_fn) (int y, void *user_data);

/* What actually happened, filled in by every filter call when non-NULL. */
typedef struct {
  cudafx_backend backend_used;  /* CPU or CUDA */
  int            threads_used;  /* CPU threads (0 on CUDA) */
  char           device[128];   /* "NVIDIA H100 80GB HBM3" or "CPU" */
  char           fallback[256]; /* why CUDA was not used in auto mode; "" if it was or not tried */
  double         kernel_ms;     /* CUDA: time in kernels (CUDA events); 0 on the CPU */
  double         transfer_ms;   /* CUDA: time in host<->device copies */
} cudafx_report;

typedef struct {
  cudafx_backend     backend;   /* AUTO: CUDA when usable, env CUDAFX_BACKEND=cpu|cuda overrides */
  int                threads;   /* 0 = all cores */
  cudafx_progress_fn progress;  /* may be NULL */
  void              *user_data;
  cudafx_report     *report;    /* may be NULL */
  int                device;    /* CUDA device counted from 1 as the runtime lists them (CUDA_VISIBLE_DEVICES
                                   applied): device k is the runtime's k - 1; 0: the default one,
                                   CUDAFX_DEVICE or the first usable */
  int                lane;      /* CUDA: which of the device's CUDAFX_CUDA_LANES call contexts (lane mod
                                   CUDAFX_CUDA_LANES; >= 0): calls on different lanes of one device run
                                   at once, each with its own streams and device buffers, so one call's
                                   copies overlap another's kernels; calls on one lane wait for each
                                   other. Quantize always takes lane 0 (its kernels share the device's
                                   constant memory). The CPU ignores it */
  cudafx_rows_ready_fn rows_ready; /* may be NULL */
  void                *rows_user;  /* rows_ready's and rows_needed's user_data */
  cudafx_rows_needed_fn rows_needed; /* may be NULL: src is whole when the call starts */
} cudafx_options;

/* Lanes of one CUDA device (options.lane). */
#define CUDAFX_CUDA_LANES 2

/* Defaults: backend auto, all threads, no progress, no report. */
void cudafx_options_init (cudafx_options *options);

/* The backend requested by asked (an options' or a filter's parameters'
 * backend) and the environment together: asked, except that auto becomes
 * cpu or cuda when CUDAFX_BACKEND names one. The engine's dispatch starts
 * from it; a host with a rule of its own for auto (the CLI's) applies its
 * rule only while this is still auto, so that the variable means the same in
 * every host. */
cudafx_backend cudafx_backend_requested (cudafx_backend asked);

/* Describes the backends for humans: "CUDA: NVIDIA H100 80GB HBM3" or
 * "CPU, 16 threads — no CUDA device (reason)". Writes at most size bytes. */
void cudafx_backend_describe (char *buf, size_t size);

/* CUDA devices a call may choose with options.device (1..count): those the
 * CUDA runtime lists, CUDA_VISIBLE_DEVICES applied; 0 without CUDA. The first
 * call starts the CUDA driver. */
int cudafx_cuda_devices (void);

/* Does the backends' one-time set-up now (for CUDA: the driver, the device's
 * context, its streams), so that the first filter call does not wait for it;
 * a host calls it on a thread of its own when a filter is about to be used.
 * Safe to call from any thread, any number of times; does nothing when the
 * CPU is asked for (CUDAFX_BACKEND=cpu) or no device is usable, and reports
 * nothing: the filter calls report as usual. */
void cudafx_backend_warm_up (void);

/* Host memory for images, which the CUDA backend copies to and from the
 * device directly: pinned (page-locked) once the CUDA backend has started,
 * plain memory before that, without CUDA, with CUDAFX_BACKEND=cpu or when
 * pinning fails. It never waits for CUDA's start-up. An image (src or dst of
 * a filter) lying wholly in one pinned block skips the backend's own staging
 * copy on the way in and out. Pinning costs time (the pages cleared, then
 * registered with the driver; docs/BENCHMARKS.md, "Pinned memory and huge
 * pages", has the figures): a host
 * keeps such memory across calls rather than allocating it per call. NULL when there
 * is not enough memory. */
void *cudafx_host_alloc (size_t bytes);
/* Plain memory laid out for cudafx_host_pin to pin quickly, and with few
 * page faults: 2 MB-aligned, in huge pages where the system gives them on
 * request (Linux's "madvise" setting). Free it with cudafx_host_free, or
 * with free () while not pinned. NULL when there is not enough memory. */
void *cudafx_host_alloc_plain (size_t bytes);
/* Frees memory from cudafx_host_alloc (NULL: nothing). */
void  cudafx_host_free (void *p);
/* 1 when bytes at p lie in one pinned block of cudafx_host_alloc. */
int   cudafx_host_pinned (const void *p, size_t bytes);
/* 1 when cudafx_host_alloc would now pin: a host that holds plain memory
 * from before CUDA's start-up may then allocate again. */
int   cudafx_host_pinnable (void);
/* Pins bytes at p, plain memory from malloc, posix_memalign or
 * cudafx_host_alloc_plain that the host holds, as a block of
 * cudafx_host_alloc: 1 when pinned (free it with cudafx_host_free then),
 * 0 when it stays plain (as cudafx_host_pinnable says). Quickest for
 * cudafx_host_alloc_plain's memory once written (its pages exist). */
int   cudafx_host_pin (void *p, size_t bytes);

/* ---- argument table ---------------------------------------------------------
 * One description of every procedure's arguments, read by the GIMP 3 and 2.10
 * hosts (procedure arguments), the dialogs (widgets), the CLI (options, --help)
 * and the engine (validation, defaults). Labels and blurbs are untranslated
 * msgids; hosts pass them through gettext (domain "cudafx"). */

typedef enum {
  CUDAFX_ARG_INT,
  CUDAFX_ARG_DOUBLE,
  CUDAFX_ARG_BOOLEAN,
  CUDAFX_ARG_CHOICE,        /* value is the choice's index; nicks are stable ids */
  CUDAFX_ARG_DOUBLE_ARRAY,  /* convolution kernel: n*n values, n odd */
  CUDAFX_ARG_PALETTE        /* quantize's given palette: a GIMP palette, a .gpl file on the CLI */
} cudafx_arg_type;

typedef struct {
  const char *nick;   /* "floyd-steinberg": GIMP choice nick and CLI value */
  const char *label;  /* "Floyd–Steinberg" */
} cudafx_choice;

/* Where an argument's value lives in cudafx_filter_params (below), as libvips
 * binds its arguments to struct fields: hosts and the engine move values in,
 * read defaults and validate by walking the table, never by name. */
typedef enum {
  CUDAFX_FIELD_NONE,    /* not the engine's: a host's own argument (GIMP's palette options) */
  CUDAFX_FIELD_INT,     /* int: int arguments, booleans (0/1) and choices (int-sized enums) */
  CUDAFX_FIELD_UINT32,  /* uint32_t */
  CUDAFX_FIELD_DOUBLE,  /* double */
  CUDAFX_FIELD_KERNEL,  /* the convolution kernel: pointer and size, set from the host's array */
  CUDAFX_FIELD_PALETTE  /* quantize's palette pointer, set by the host from what it loaded */
} cudafx_field;

typedef struct {
  const char          *name;   /* "search-radius": GIMP argument and CLI --search-radius */
  const char          *label;  /* "_Search radius" (mnemonic for dialogs) */
  const char          *blurb;  /* one sentence for tooltips, PDB docs and --help */
  cudafx_arg_type      type;
  double               min, max, def; /* int, double; boolean 0/1; choice index */
  const cudafx_choice *choices;       /* CHOICE only, n_choices entries */
  int                  n_choices;
  cudafx_field         field;         /* engine arguments: how the value is stored */
  size_t               offset;        /* engine arguments: offsetof (cudafx_filter_params, ...) */
  int                  chosen_by_auto; /* the filter's automatic mode (its "auto" argument) chooses
                                          this value: dialogs grey it out while auto is on, and
                                          giving it on the CLI selects manual mode */
} cudafx_arg;

typedef struct {
  const char       *name;       /* "nl-means": CLI subcommand */
  const char       *procedure;  /* "plug-in-cudafx-nl-means" */
  const char       *menu_label; /* "Non-Local Means (GPU)..." */
  const char       *menu_path;  /* "<Image>/Filters/Enhance" */
  const char       *blurb;      /* one line */
  const char       *help;       /* a paragraph */
  const cudafx_arg *args;       /* the filter's own arguments, then "backend" */
  int               n_args;
  size_t            params_offset; /* its struct in cudafx_filter_params (.median, ...) */
  size_t            params_size;
} cudafx_filter_desc;

enum { CUDAFX_FILTER_MEDIAN, CUDAFX_FILTER_NLMEANS, CUDAFX_FILTER_QUANTIZE,
       CUDAFX_FILTER_CONVOLVE, CUDAFX_FILTER_NLBAYES, CUDAFX_N_FILTERS };

extern const cudafx_filter_desc cudafx_filters[CUDAFX_N_FILTERS];

/* By CLI name or procedure name; NULL if unknown. */
const cudafx_filter_desc *cudafx_filter_find (const char *name);
/* Argument by name; NULL if unknown. */
const cudafx_arg *cudafx_arg_find (const cudafx_filter_desc *filter, const char *name);
/* Choice index of a nick, or -1. */
int cudafx_choice_find (const cudafx_arg *arg, const char *nick);

/* ---- median --------------------------------------------------------------- */

typedef enum { CUDAFX_SHAPE_SQUARE = 0, CUDAFX_SHAPE_CIRCLE = 1 } cudafx_shape;

typedef struct {
  int          radius;      /* 1..100: window (2r+1)^2, or the disc of radius r */
  double       percentile;  /* 0..100: rank round(p/100*(n-1)) of the n window values */
  cudafx_shape shape;
} cudafx_median_params;

void          cudafx_median_params_init (cudafx_median_params *p);
cudafx_status cudafx_median (const cudafx_image *src, cudafx_image *dst,
                             const cudafx_median_params *p, const cudafx_options *o);

/* ---- non-local means ------------------------------------------------------ */

/* Noise level function of automatic nl-means: per colour channel
 * the noise variance a x + b of the linear-light value x (0..1; sRGB
 * decoded), camera noise (shot noise plus read noise), fitted to the image.
 * When the image's noise is as strong at every brightness (in pixel units),
 * signal_dependent is 0 and the one sigma of cudafx_nlmeans_info is the model. */
#define CUDAFX_NOISE_MAX_CHANNELS 4
typedef struct {
  int    signal_dependent;
  int    channels;                        /* colour channels the model has */
  double a[CUDAFX_NOISE_MAX_CHANNELS];    /* shot noise: variance per unit of linear light */
  double b[CUDAFX_NOISE_MAX_CHANNELS];    /* read noise: variance at black */
  /* The noise sigma in pixel units (0..255 scale), mean over the channels, in
   * the shadows (sRGB 32) and highlights (sRGB 224): what dialogs show. */
  double sigma_dark, sigma_light;
  /* How the noise is correlated, as estimated (0 where the model was given;
   * spatial_corr[1][1] is 1): spatial_corr[dy + 1][dx + 1] the correlation
   * of a pixel's noise with its neighbour's at (dx, dy), mean over the
   * colour channels; correlation the mean of the four nearest (0: white
   * noise, towards 1: noise smoothed over several pixels, as demosaicking
   * and JPEG leave a camera's); channel_corr between the colour channels at
   * one pixel (mean over the pairs, 0 for grey); correlated 1 when
   * correlation is 0.5 or more (white noise measures at most about 0.33,
   * what texture leaves in the estimate): nl-means then denoises it as flat
   * noise of its whole sigma. */
  int    correlated;
  double correlation;
  double spatial_corr[3][3];
  double channel_corr;
} cudafx_noise_model;

typedef struct {
  int    automatic;      /* estimate sigma and choose h, patch and search radius */
  double h;              /* 0.1..100, filtering strength on the 0..255 scale */
  int    patch_radius;   /* 1..5 */
  int    search_radius;  /* 1..20 */
  double sigma;          /* automatic: > 0 is the noise sigma to use instead of estimating
                            it from src (a dialog previews part of the area a run estimates on) */
  cudafx_noise_model noise; /* with sigma > 0: the model found with it (signal_dependent 0: sigma alone) */
  int    report_noise;   /* manual mode: estimate the noise too, for info (a CPU estimate the
                            filter itself does not need) */
} cudafx_nlmeans_params;

/* What an nl-means run used (automatic mode fills in what it chose). */
typedef struct {
  double sigma;          /* estimated noise sigma, 0..255 scale (manual mode: with report_noise, else 0) */
  double h;
  int    patch_radius;
  int    search_radius;
  double patch_sigma;    /* std dev of the Gaussian patch weights (pixels); 0: flat patch */
  int    centre_max;     /* the centre pixel weighs as its most similar neighbour, else 1 */
  /* The noise model found (automatic mode, or a manual run with report_noise):
   * when signal_dependent, h, patch and search radius apply to the image
   * after the variance-stabilising transform, whose noise sigma is
   * stabilised_sigma (0..255 scale). */
  cudafx_noise_model noise;
  double stabilised_sigma;
} cudafx_nlmeans_info;

void          cudafx_nlmeans_params_init (cudafx_nlmeans_params *p);
/* info may be NULL. */
cudafx_status cudafx_nlmeans (const cudafx_image *src, cudafx_image *dst,
                              const cudafx_nlmeans_params *p, const cudafx_options *o,
                              cudafx_nlmeans_info *info);
/* Noise sigma (0..255 scale) of an image, and the parameters auto mode picks. */
cudafx_status cudafx_nlmeans_estimate (const cudafx_image *src, const cudafx_options *o,
                                       cudafx_nlmeans_info *info);

/* ---- non-local Bayes ------------------------------------------------------ */

typedef struct {
  int    automatic;  /* estimate the noise (nl-means' estimator: flat or camera noise) */
  double sigma;      /* 0.1..100: the noise sigma on the 0..255 scale when not automatic */
  int    flat_area;  /* the paper's flat-area test: a group whose spread is the noise's
                        alone is replaced by its mean */
  /* Not in the argument table; hosts set them. */
  double estimate;   /* automatic: > 0 is the sigma found beforehand on the whole image
                        (a dialog previews part of the area a run estimates on) */
  cudafx_noise_model noise; /* with estimate > 0: the model found with it */
  int    origin_x, origin_y; /* where src's top-left pixel lies in the whole image (0 0 unless
                                src is a part of it): the grid of reference patches stays the
                                whole image's, so a part equals the same part of a whole run */
} cudafx_nlbayes_params;

/* What an nl-bayes run used. */
typedef struct {
  double sigma;              /* the noise sigma (0..255 scale): given, or estimated */
  cudafx_noise_model noise;  /* the noise model (flat: sigma at every brightness) */
  double stabilised_sigma;   /* camera noise: the sigma denoised with behind the transform; else 0 */
  int    patch_size[2];      /* step 1 and step 2: the patches' side */
  int    group_size[2];      /* similar patches per group (step 2: at least) */
  int    search_size[2];     /* the search window's side */
  int    flat_area;
} cudafx_nlbayes_info;

void          cudafx_nlbayes_params_init (cudafx_nlbayes_params *p);
/* info may be NULL. */
cudafx_status cudafx_nlbayes (const cudafx_image *src, cudafx_image *dst,
                              const cudafx_nlbayes_params *p, const cudafx_options *o,
                              cudafx_nlbayes_info *info);

/* Pixels on each side of a pixel that nl-bayes' output there depends on, for p
 * on an image of colours colour channels (alpha excluded): the halo a host
 * reads around a part of the image (a selection, a preview, a GEGL region) so
 * that the part equals the same part of a whole-image run. Automatic mode with
 * an estimate: the halo of that noise; without one: the largest any noise
 * level gives, since the plan follows the noise found. */
int           cudafx_nlbayes_halo (const cudafx_nlbayes_params *p, int colours);

/* ---- colour quantization -------------------------------------------------- */

typedef enum { CUDAFX_SPACE_OKLAB = 0, CUDAFX_SPACE_RGB = 1 } cudafx_color_space;
typedef enum {
  CUDAFX_DITHER_NONE = 0,
  CUDAFX_DITHER_FLOYD_STEINBERG = 1,
  CUDAFX_DITHER_FS_LOW_BLEED = 2,  /* Floyd–Steinberg, the incoming error limited as GIMP's "reduced bleeding" */
  CUDAFX_DITHER_ORDERED = 3,       /* positioned: a 16x16 Bayer matrix */
  CUDAFX_DITHER_BLUE_NOISE = 4     /* positioned: a 64x64 void-and-cluster mask */
} cudafx_dither;

#define CUDAFX_MAX_COLORS 256

/* The palette a quantize run produced, in the image's colour channels
 * (alpha excluded) on the 0..255 scale, rounded to the element type; also
 * a palette given to a run (cudafx_quantize_params.palette, cudafx_gpl_parse). */
typedef struct {
  int    colors;                        /* entries used (may be < requested if the image has fewer colours) */
  int    channels;                      /* 1 (grey) or 3 (RGB) */
  double entries[CUDAFX_MAX_COLORS][3];
  int    iterations;                    /* k-means iterations run (0 with a given palette) */
} cudafx_palette;

typedef struct {
  int                   colors;          /* 2..256 */
  cudafx_color_space    color_space;
  cudafx_dither         dither;
  int                   max_iterations;  /* 1..300 */
  uint32_t              seed;            /* 0..2^31-1 */
  const cudafx_palette *palette;         /* NULL: compute a palette (k-means); else map to this one
                                            (1..256 entries; colors, max_iterations, seed unused) */
} cudafx_quantize_params;

/* A GIMP palette file (.gpl) as text: "GIMP Palette", optional "Name:" and
 * "Columns:" lines, comments (#), then one "R G B [name]" line per entry
 * (0..255). `source` names the text in messages ("brand.gpl"); an error's
 * message names it and the line at fault. Entries go to out->entries with
 * channels 3; out->colors is their count (1..256). */
cudafx_status cudafx_gpl_parse (const char *text, size_t length, const char *source, cudafx_palette *out);
/* The same from a file; the message also names a file that cannot be read. */
cudafx_status cudafx_gpl_load (const char *path, cudafx_palette *out);

void          cudafx_quantize_params_init (cudafx_quantize_params *p);
/* palette may be NULL. */
cudafx_status cudafx_quantize (const cudafx_image *src, cudafx_image *dst,
                               const cudafx_quantize_params *p, const cudafx_options *o,
                               cudafx_palette *palette);

/* ---- convolution ---------------------------------------------------------- */

typedef enum {
  CUDAFX_PRESET_CUSTOM = 0,
  CUDAFX_PRESET_LAPLACIAN_5X5,
  CUDAFX_PRESET_SHARPEN_5X5,
  CUDAFX_PRESET_HIGH_PASS_5X5,
  CUDAFX_PRESET_MEAN_3X3,
  CUDAFX_PRESET_BLUR_3X3,
  CUDAFX_PRESET_BLUR_5X5,
  CUDAFX_PRESET_GAUSSIAN,
  CUDAFX_PRESET_SOBEL_HORIZONTAL,
  CUDAFX_PRESET_SOBEL_VERTICAL
} cudafx_preset;

typedef enum {
  CUDAFX_BORDER_CLAMP = 0,
  CUDAFX_BORDER_MIRROR,
  CUDAFX_BORDER_WRAP,
  CUDAFX_BORDER_BLACK
} cudafx_border;

#define CUDAFX_MAX_KERNEL_SIZE 31

typedef struct {
  cudafx_preset preset;
  const double *kernel;       /* custom: kernel_size^2 values, row-major */
  int           kernel_size;  /* custom: odd, 1..31 */
  double        sigma;        /* gaussian: 0.1..50 */
  double        divisor;      /* 0 = normalise by the kernel sum (1 if the sum is 0) */
  double        offset;       /* -255..255, added after division, 0..255 scale */
  cudafx_border border;
} cudafx_convolve_params;

void          cudafx_convolve_params_init (cudafx_convolve_params *p);
cudafx_status cudafx_convolve (const cudafx_image *src, cudafx_image *dst,
                               const cudafx_convolve_params *p, const cudafx_options *o);

/* The effective kernel of a parameter set (the preset's, or the custom one):
 * writes size*size values to taps (room for CUDAFX_MAX_KERNEL_SIZE^2) and the
 * size to *size. Used by dialogs to show a preset in the kernel grid. */
cudafx_status cudafx_convolve_kernel (const cudafx_convolve_params *p, double *taps, int *size);

/* A custom kernel written as text, "a,b,c;d,e,f;g,h,i" (the CLI's --kernel,
 * the GEGL operation's kernel property): n rows of n values, n odd within the
 * table's range. Writes n*n values to taps (room for CUDAFX_MAX_KERNEL_SIZE^2)
 * and n to *size; an error's message names the row and value at fault. */
cudafx_status cudafx_kernel_parse (const char *text, double *taps, int *size);

/* ---- running a filter from argument-table values ----------------------------
 * What every host does with the values it collected by walking the table. */

typedef struct {
  cudafx_median_params   median;
  cudafx_nlmeans_params  nlmeans;
  cudafx_quantize_params quantize;
  cudafx_convolve_params convolve;
  cudafx_nlbayes_params  nlbayes;
  cudafx_backend         backend;
} cudafx_filter_params;

/* What a run reports beyond its pixels. */
typedef struct {
  cudafx_report       report;
  cudafx_nlmeans_info nlmeans;   /* nl-means: sigma and the parameters used */
  cudafx_palette      palette;   /* quantize */
  cudafx_nlbayes_info nlbayes;   /* nl-bayes: sigma, noise model and the parameters used */
} cudafx_run_result;

/* values: one per argument of cudafx_filters[filter], in table order (int,
 * double, boolean 0/1, choice index; the kernel argument's entry is unused);
 * kernel: kernel_size^2 values of a custom convolution kernel, or NULL for the
 * default. Only the filter's own struct and backend are filled. No validation:
 * the filter call validates. */
void cudafx_filter_params_from_values (int filter, const double *values, const double *kernel,
                                       int kernel_size, cudafx_filter_params *p);

/* Bytes of cudafx_filter_params, for bindings that treat it as opaque. */
size_t cudafx_filter_params_size (void);

/* Bytes of the structs a binding mirrors field by field (bench/pycudafx.py),
 * so that it can refuse to run with a stale copy: a field added here and not
 * there made the engine read a host's options past their end. */
size_t cudafx_image_size (void);
size_t cudafx_options_size (void);
size_t cudafx_run_result_size (void);

/* Runs filter with p (its backend replaces o's); result may be NULL. */
cudafx_status cudafx_run_filter (int filter, const cudafx_filter_params *p, const cudafx_image *src,
                                 cudafx_image *dst, const cudafx_options *o,
                                 cudafx_run_result *result);

#ifdef __cplusplus
}
#endif

#endif /* CUDAFX_H */
