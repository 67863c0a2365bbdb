# SPDX-License-Identifier: GPL-3.0-or-later
# cudafx — build the engine, the CLI, the tests and the benchmarks.
# The engine (core/, cuda/), its tests and benchmarks need only a C compiler
# (and nvcc for the CUDA backend); the CLI needs GEGL.

CC        ?= gcc
# A packaged binary must run on any x86-64: no -march=native unless asked
# (`make ARCHFLAGS=-march=native`; docs/BENCHMARKS.md, "CPU vector paths").
ARCHFLAGS ?=
# CFLAGS and LDLIBS are the user's (`make CFLAGS=-O2`); what correctness
# needs is added to them whatever they say (override), so that no command
# line loses it: -ffp-contract=off, no fused multiply-adds the source did
# not ask for, so results do not depend on the compiler's choices (CPU/GPU
# determinism, docs/TESTING.md); -fopenmp, the CPU filters' threads (without
# it the pragmas vanish and omp_* calls fail to link); -std=gnu11, the
# language the sources are written in; -fPIC, the shared engine and the
# plug-ins' modules link the same objects.
CFLAGS    ?= -O3 -g
# -Wno-psabi: GCC notes that the vector helpers' wide return types change the
# ABI without AVX; they are static, so no call crosses a compiled boundary.
override CFLAGS += $(ARCHFLAGS) -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-psabi \
                   -ffp-contract=off -fopenmp -fPIC
override LDLIBS += -fopenmp -lm

BUILD     ?= build
# Header dependencies, written by the compilers beside each object.
DEPFLAGS  := -MMD -MP

# CUDA: nvcc from PATH, else /usr/local/cuda; `make CUDA=0` builds CPU-only.
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_SRCS := $(wildcard cuda/*.cu)
ifeq ($(CUDA),0)
NVCC :=
endif
ifneq ($(and $(NVCC),$(CUDA_SRCS)),)
# Ask nvcc where its toolkit lives: the nvcc on PATH may be a wrapper script
# outside the toolkit (/usr/local/bin/nvcc exec'ing /usr/local/cuda-13.0/bin/nvcc).
CUDA_HOME    ?= $(realpath $(shell $(NVCC) --dryrun -E -x cu /dev/null 2>&1 | sed -n 's/^\#\$$ TOP=//p'))
CUDA_ARCHS   ?= -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
                -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 \
                -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# --fmad=false (the GPU's side of -ffp-contract=off), C++17, the host
# compiler's flags and the architectures (CUDA_ARCHS chooses them) are kept
# whatever NVCCFLAGS says, as CFLAGS' are.
NVCCFLAGS    ?= -O3
override NVCCFLAGS += $(CUDA_ARCHS) -std=c++17 -Xcompiler -fPIC,-fopenmp --fmad=false
CUDA_OBJS    := $(CUDA_SRCS:cuda/%.cu=$(BUILD)/cuda/%.o)
CUDART_A     := $(firstword $(wildcard $(addsuffix /libcudart_static.a,\
                  $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(CUDA_HOME)/targets/*/lib)))
ifeq ($(CUDART_A),)
$(error libcudart_static.a not found under $(CUDA_HOME) (nvcc: $(NVCC)); build with CUDA=0 for CPU only)
endif
CUDA_LDLIBS  := $(CUDART_A) -ldl -lrt -lpthread -lstdc++
CUDA_STATE   := CUDA ($(NVCC))
# The engine lists the CUDA backend's table only where it is built.
CUDA_DEFS    := -DCUDAFX_HAVE_CUDA
else
CUDA_OBJS    :=
CUDA_LDLIBS  :=
CUDA_DEFS    :=
CUDA_STATE   := CPU only (no nvcc or CUDA=0)
endif

CORE_SRCS := $(wildcard core/*.c)
CORE_OBJS := $(CORE_SRCS:core/%.c=$(BUILD)/core/%.o)
LIB       := $(BUILD)/libcudafx.a
# Shared engine for Python (ctypes) benchmarks and quality scripts.
SHLIB     := $(BUILD)/libcudafx.so
LIB_LIBS  := $(CUDA_LDLIBS) $(LDLIBS)

UNIT_SRCS := $(wildcard tests/unit/*.c)
UNIT_OBJS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%.o)
# The CLI's parts that need no GEGL (cli/batch.c, cli/image_pool.c), tested
# in a program of their own with the unit tests' runner, so that test-unit
# links the engine alone.
CLI_UNIT_SRCS := $(wildcard tests/cli-unit/*.c)
CLI_UNIT_OBJS := $(CLI_UNIT_SRCS:tests/cli-unit/%.c=$(BUILD)/tests-cli/%.o) $(BUILD)/tests/main.o
CLI_UNIT_PARTS := $(BUILD)/cli/batch.o $(BUILD)/cli/image_pool.o
GPU_SRCS  := $(wildcard tests/gpu/*.c)
GPU_OBJS  := $(GPU_SRCS:tests/gpu/%.c=$(BUILD)/tests-gpu/%.o)

# The CLI: GEGL, and the codec libraries it calls directly (cli/io_*.c).
CODEC_PKGS := libpng libjpeg libtiff-4 libwebp libwebpmux libwebpdemux zlib netpbm
GEGL_OK   := $(shell pkg-config --exists gegl-0.4 $(CODEC_PKGS) && echo yes)
ifeq ($(GEGL_OK)$(wildcard cli/main.c),yescli/main.c)
CLI       := $(BUILD)/cudafx
GEGL_CFLAGS := $(shell pkg-config --cflags gegl-0.4 $(CODEC_PKGS))
GEGL_LIBS   := $(shell pkg-config --libs gegl-0.4 $(CODEC_PKGS))
endif
ifeq ($(GEGL_OK),yes)
GEGL_MODULE := $(BUILD)/gegl/cudafx-gegl.so
endif

.PHONY: all install locale check check-asan check-gpu bench bench-gpu quality clean plugin check-gimp pot update-po
# Translations, gettext domain "cudafx": po/<lang>.po compiled to
# $(BUILD)/locale/<lang>/LC_MESSAGES/cudafx.mo, the layout both GIMPs and the
# CLI look for beside their executable. `make pot` re-extracts the strings,
# `make update-po` merges them into every catalog.
MSGFMT    := $(shell command -v msgfmt 2>/dev/null)
LINGUAS   := $(patsubst po/%.po,%,$(wildcard po/*.po))
MO_FILES  := $(if $(MSGFMT),$(LINGUAS:%=$(BUILD)/locale/%/LC_MESSAGES/cudafx.mo))
I18N_C    := $(sort $(wildcard core/*.c cli/*.c plugin/*/*.c ui/*/*.c))
I18N_CXX  := $(sort $(wildcard cuda/*.cu))
XGETTEXT_FLAGS := --from-code=UTF-8 --add-comments=TRANSLATORS: --package-name=cudafx \
                  --keyword=_ --keyword=N_ --keyword=cudafx_fail:2 --flag=cudafx_fail:2:c-format \
                  --keyword=usage_error:2 --flag=usage_error:2:c-format \
                  --keyword=runtime_error:1 --flag=runtime_error:1:c-format \
                  --sort-by-file

# The GIMP plug-ins whose development files this machine has.
GIMP3_OK   := $(shell pkg-config --exists gimpui-3.0 && echo yes)
GIMP210_OK := $(shell pkg-config --exists gimpui-2.0 && echo yes)
PLUGINS    := $(if $(GIMP3_OK),$(BUILD)/gimp3-native/cudafx $(BUILD)/gimp3-native/cudafx-dialogs.so) $(if $(GIMP210_OK),$(BUILD)/gimp210/cudafx)

all: $(LIB) $(SHLIB) $(BUILD)/test-unit $(BUILD)/test-cli $(CLI) $(GEGL_MODULE) $(PLUGINS) locale
	@echo "cudafx built: $(CUDA_STATE)$(if $(CLI),, — CLI and GEGL module skipped: GEGL or a codec library not found (libgegl-dev libpng-dev libjpeg62-turbo-dev libtiff-dev libwebp-dev libnetpbm-dev))$(if $(MSGFMT),, — translations skipped: no msgfmt (gettext))"
	@echo "  GIMP 3 plug-in: $(if $(GIMP3_OK),built,skipped (no libgimp-3.0-dev)); GIMP 2.10 plug-in: $(if $(GIMP210_OK),built,skipped (no libgimp2.0-dev))"

# The catalogs alone (the plug-ins install them beside themselves).
locale: $(MO_FILES)

$(BUILD)/locale/%/LC_MESSAGES/cudafx.mo: po/%.po
	@mkdir -p $(@D)
	$(MSGFMT) --check -o $@ $<

POT ?= po/cudafx.pot
pot:
	xgettext $(XGETTEXT_FLAGS) -L C -o $(POT) $(I18N_C)
	xgettext $(XGETTEXT_FLAGS) -L C++ -j -o $(POT) $(I18N_CXX)

update-po: pot
	for po in $(wildcard po/*.po); do msgmerge --quiet --update --backup=none $$po po/cudafx.pot; done

$(BUILD)/core/%.o: core/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_DEFS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/cuda/%.o: cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(DEPFLAGS) -c $< -o $@

$(LIB): $(CORE_OBJS) $(CUDA_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(SHLIB): $(CORE_OBJS) $(CUDA_OBJS)
	$(CC) -shared $^ $(LIB_LIBS) -o $@

$(BUILD)/tests/%.o: tests/unit/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_DEFS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/test-unit: $(UNIT_OBJS) $(LIB)
	$(CC) $(CFLAGS) $(UNIT_OBJS) $(LIB) $(LIB_LIBS) -lpthread -o $@

$(BUILD)/tests-cli/%.o: tests/cli-unit/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/test-cli: $(CLI_UNIT_OBJS) $(CLI_UNIT_PARTS) $(LIB)
	$(CC) $(CFLAGS) $(CLI_UNIT_OBJS) $(CLI_UNIT_PARTS) $(LIB) $(LIB_LIBS) -lpthread -o $@

# The GPU median's selection networks, checked on the host by the 0/1 principle.
$(BUILD)/test-median-network: tests/unit/median_network.cc cuda/median_network.h
	@mkdir -p $(@D)
	$(CXX) -O2 -std=c++17 -Wall -Wextra $< -o $@

# GPU tests also ask the CUDA runtime (cudaMemGetInfo) how much memory is free.
$(BUILD)/tests-gpu/%.o: tests/gpu/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPFLAGS) -I$(CUDA_HOME)/include -c $< -o $@

# The unit tests plus the CUDA-machinery tests, for the CUDA backend.
$(BUILD)/test-gpu: $(UNIT_OBJS) $(GPU_OBJS) $(LIB)
	$(CC) $(CFLAGS) $(UNIT_OBJS) $(GPU_OBJS) $(LIB) $(LIB_LIBS) -lpthread -o $@

$(BUILD)/cli/%.o: cli/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPFLAGS) $(GEGL_CFLAGS) -c $< -o $@

CLI_SRCS := $(wildcard cli/*.c)
# The CLI's pieces other than main's file: the option fuzzer links them with
# its own entry point; test-cli links the pipeline scheduler and the image
# pool (batch.c, image_pool.c: no GEGL).
CLI_PARTS := $(filter-out cli/main.c,$(CLI_SRCS))

$(BUILD)/cudafx: $(CLI_SRCS:cli/%.c=$(BUILD)/cli/%.o) $(LIB)
	$(CC) $(CFLAGS) $(filter %.o,$^) $(LIB) $(GEGL_LIBS) $(LIB_LIBS) -lpthread -o $@

# The benchmarks' build of the CLI: the same objects and bench/cli_bench.c,
# which reads the switches bench_e2e.py and batch_fixed_cost.py set (the
# codecs alone, the codec threads' priority), so that the shipped cudafx has
# none of them. Built by `make check` (which tests it) and `make bench-e2e`,
# never installed.
CLI_BENCH := $(if $(CLI),$(BUILD)/cudafx-bench)

$(BUILD)/bench/cli_bench.o: bench/cli_bench.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPFLAGS) $(GEGL_CFLAGS) -c $< -o $@

$(BUILD)/cudafx-bench: $(CLI_SRCS:cli/%.c=$(BUILD)/cli/%.o) $(BUILD)/bench/cli_bench.o $(LIB)
	$(CC) $(CFLAGS) $(filter %.o,$^) $(LIB) $(GEGL_LIBS) $(LIB_LIBS) -lpthread -o $@

# The GEGL operations module (cudafx:median, ...): the engine linked in
# statically, only GEGL's two module entry points exported, so that the
# engine's symbols cannot meet another copy in the host's process.
# Procedure values and region I/O are the toolkit-free part of ui/common/.
GEGL_MODULE_SRCS := $(wildcard plugin/gegl/*.c) ui/common/procedures.c ui/common/region.c
GEGL_MODULE_HDRS := $(wildcard plugin/gegl/*.h) ui/common/procedures.h ui/common/region.h core/cudafx.h core/i18n.h
GEGL_MODULE_INC  := -Icore -Iui/common
GEGL_MODULE_FLAGS := -shared -fvisibility=hidden -Wl,--exclude-libs,ALL -Wl,-z,defs \
                     $(GEGL_MODULE_INC)

$(BUILD)/gegl/cudafx-gegl.so: $(GEGL_MODULE_SRCS) $(GEGL_MODULE_HDRS) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Werror=implicit-function-declaration $(GEGL_MODULE_FLAGS) \
	  $$(pkg-config --cflags gegl-0.4) $(GEGL_MODULE_SRCS) $(LIB) $$(pkg-config --libs gegl-0.4) \
	  $(LIB_LIBS) -o $@

# The GEGL benchmark program (bench/gegl_bench.c), for bench/gegl-device.sh.
$(BUILD)/gegl_bench: bench/gegl_bench.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -Wno-unused-parameter $< $$(pkg-config --cflags --libs gegl-0.4) -ldl -o $@

# cudafx:nl-means' σ as GIMP's filter dialog receives it, for tests/gegl/run.sh
# (which tests/run.sh runs too) where the GEGL module is built.
GEGL_SIGMA_TEST := $(if $(GEGL_MODULE),$(BUILD)/test-gegl-sigma)

# The dialogs' noise line (ui/common/dialog-common.c, GLib and GEGL only) on
# GEGL buffers, for tests/run.sh where GEGL's development files are.
NOISE_LINE_TEST := $(if $(GEGL_MODULE),$(BUILD)/test-noise-line)
NOISE_LINE_SRCS := tests/ui/noise_line.c ui/common/dialog-common.c ui/common/region.c ui/common/procedures.c

$(BUILD)/test-noise-line: $(NOISE_LINE_SRCS) ui/common/dialog-common.h ui/common/region.h ui/common/procedures.h $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Werror=implicit-function-declaration -Icore -Iui/common $$(pkg-config --cflags gegl-0.4) \
	  $(NOISE_LINE_SRCS) $(LIB) $$(pkg-config --libs gegl-0.4) $(LIB_LIBS) -o $@

# Unit tests (the engine's, test-unit, and the CLI's scheduler's, test-cli),
# then the same tests under AddressSanitizer + UBSan, the median networks,
# the layers, then the CLI's tests; one summary line at the end.
# `make check TESTS="NAME-PART..."` runs only the engine's tests whose names
# contain a part (`make check TESTS=median_circle`; `=NAME` for one name
# exactly), on the CPU; `make check-gpu TESTS=...` the same on CUDA;
# `BUILD/test-cli NAME-PART...` the CLI's.
TESTS ?=
check: all $(BUILD)/test-median-network $(GEGL_SIGMA_TEST) $(NOISE_LINE_TEST) $(CLI_BENCH)
ifeq ($(strip $(TESTS)),)
	@CUDAFX_BACKEND=cpu tests/run.sh $(BUILD)
else
	@CUDAFX_BACKEND=cpu $(BUILD)/test-unit $(TESTS)
endif

# The GEGL operations through the `gegl` command (Debian: gegl): equal to
# the CLI, and equal to themselves however GEGL splits the work. A few
# minutes; ends with "N passed, N failed".
.PHONY: check-gegl
check-gegl: $(GEGL_MODULE) $(CLI) $(GEGL_SIGMA_TEST)
	@test -n "$(GEGL_MODULE)" || { echo "check-gegl needs GEGL's development files (libgegl-dev)"; exit 1; }
	tests/gegl/run.sh $(BUILD)

$(BUILD)/test-gegl-sigma: tests/gegl/sigma_notify.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -Wno-unused-parameter $< $$(pkg-config --cflags --libs gegl-0.4) -lm -o $@

# On a machine with a CUDA device: the filters' tests against the CUDA
# backend, striping and fault fallback, then compute-sanitizer.
check-gpu: $(BUILD)/test-gpu
	@test -n "$(CUDA_OBJS)" || { echo "check-gpu needs nvcc"; exit 1; }
ifeq ($(strip $(TESTS)),)
	@tests/run.sh $(BUILD) gpu
else
	@CUDAFX_TEST_BACKEND=cuda $(BUILD)/test-gpu $(TESTS)
endif

# Reliability of the CUDA backend (on the CUDA machine): device memory over
# 1000 preview calls, injected faults on first calls and mid-run, a 100 MP
# float image under a 256 MB device-memory cap, two processes at once.
GPU_PYTHON ?= python3
.PHONY: reliability-gpu
reliability-gpu: $(SHLIB) $(BUILD)/test-gpu
	@test -n "$(CUDA_OBJS)" || { echo "reliability-gpu needs nvcc"; exit 1; }
	$(BUILD)/test-gpu device_memory_over_1000_previews
	$(GPU_PYTHON) tests/reliability/gpu.py faults
	$(GPU_PYTHON) tests/reliability/gpu.py concurrent
	$(GPU_PYTHON) tests/reliability/gpu.py huge

# GPU benchmark against CuPy, PyTorch and NPP (on the CUDA machine).
NPP_LIBS ?= -lnppif -lnppig -lnppc
$(BUILD)/bench_npp: bench/bench_npp.cu
	@mkdir -p $(@D)
	$(NVCC) -O3 -std=c++17 -arch=native $< $(NPP_LIBS) -o $@

bench-gpu: $(SHLIB)
	-$(MAKE) --no-print-directory $(BUILD)/bench_npp
	python3 bench/bench_gpu.py

# The CUDA backend's whole call against a bare pinned round trip.
$(BUILD)/bench-call: bench/bench_call.c $(LIB)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include $< $(LIB) $(LIB_LIBS) -lpthread -o $@

ASAN_MAKE := $(MAKE) --no-print-directory BUILD=build-asan CUDA=0 ARCHFLAGS= \
  CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
  LDLIBS="-fsanitize=address,undefined -fopenmp -lm"

check-asan:
	$(ASAN_MAKE) build-asan/test-unit
	ASAN_OPTIONS=detect_leaks=1 build-asan/test-unit

# The CLI's scheduler and image pool (test-cli) under the same sanitizers.
.PHONY: check-asan-cli
check-asan-cli:
	$(ASAN_MAKE) build-asan/test-cli
	ASAN_OPTIONS=detect_leaks=1 build-asan/test-cli

# The CLI under ASan+UBSan+LeakSanitizer on every filter and its error paths.
.PHONY: check-lsan
check-lsan:
	@$(ASAN_MAKE) build-asan/cudafx
	@tests/sanitize/cli.sh build-asan/cudafx

# libFuzzer harnesses (tests/fuzz) under ASan+UBSan, built with clang: the
# engine's entry points and the CLI's option parsing. `make fuzz` runs each
# for FUZZ_SECONDS from the committed corpus (tests/fuzz/corpus/NAME, read
# only); new inputs go to build-fuzz/corpus/NAME, crashes to build-fuzz/.
# `make fuzz-replay` runs the committed corpus once (a regression test).
# The engine's fuzzer leaves out comparison tracing: in the filters' inner
# loops it cost 5x the executions, and the harness decodes no magic values.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 120
FUZZ_FLAGS   := -O1 -g -std=gnu11 -fopenmp -ffp-contract=off -fno-omit-frame-pointer -Wno-psabi \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_ENGINE  := $(CORE_SRCS)
FUZZERS      := build-fuzz/fuzz-engine $(if $(CLI),build-fuzz/fuzz-cli)

build-fuzz/fuzz-engine: tests/fuzz/fuzz_engine.c $(FUZZ_ENGINE) $(wildcard core/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fno-sanitize-coverage=trace-cmp tests/fuzz/fuzz_engine.c $(FUZZ_ENGINE) -lm -o $@

build-fuzz/fuzz-cli: tests/fuzz/fuzz_cli.c $(CLI_SRCS) $(wildcard cli/*.h) $(FUZZ_ENGINE) $(wildcard core/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(GEGL_CFLAGS) tests/fuzz/fuzz_cli.c $(CLI_PARTS) $(FUZZ_ENGINE) $(GEGL_LIBS) -lm -lpthread -o $@

# The image files the CLI reads: PNG, JPEG, TIFF, WebP and PNM through
# cli/image_io.c and its codecs (cli/io_*.c). `make fuzz-files` seeds each format family from
# tests/reliability/damaged_files.py (the test images, small, cut, flipped
# and forged) plus the committed findings in tests/fuzz/corpus/files, and
# runs FUZZ_SECONDS per family (gpl and txt: palettes and kernel texts,
# seeded from tests/fuzz/corpus/files); `make fuzz-files-replay` (part of `make
# check`) runs the committed corpus and the seeds once.
FUZZ_FAMILIES := png jpg tif webp p?m gpl txt
FUZZ_FILES_ENV := OMP_WAIT_POLICY=passive LSAN_OPTIONS=suppressions=$(CURDIR)/tests/fuzz/files-lsan.supp:print_suppressions=0
IMAGE_IO_SRCS := cli/image_io.c $(wildcard cli/io_*.c)
build-fuzz/fuzz-files: tests/fuzz/fuzz_files.c $(IMAGE_IO_SRCS) cli/image_io.h cli/io_codecs.h $(FUZZ_ENGINE) $(wildcard core/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(GEGL_CFLAGS) tests/fuzz/fuzz_files.c $(IMAGE_IO_SRCS) $(FUZZ_ENGINE) $(GEGL_LIBS) -lm -o $@

build-fuzz/seeds-files: tests/reliability/damaged_files.py $(wildcard tests/data/*)
	@rm -rf $@ && mkdir -p $@
	$(PYTHON3) tests/reliability/damaged_files.py generate $@ small

.PHONY: fuzz-files fuzz-files-replay
fuzz-files: build-fuzz/fuzz-files build-fuzz/seeds-files
	@for glob in $(FUZZ_FAMILIES); do family=$$glob; [ "$$glob" = "p?m" ] && family=pnm; \
	  mkdir -p build-fuzz/corpus/files-$$family build-fuzz/seeds-files-$$family; \
	  cp build-fuzz/seeds-files/*.$$glob tests/fuzz/corpus/files/*.$$glob build-fuzz/seeds-files-$$family/ 2>/dev/null; \
	  echo "== fuzz-files, $$family, for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_FILES_ENV) build-fuzz/fuzz-files -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -max_len=65536 -print_final_stats=1 -artifact_prefix=build-fuzz/files-$$family- \
	    build-fuzz/corpus/files-$$family build-fuzz/seeds-files-$$family \
	    2>&1 | grep -E '^#[0-9]+.*(DONE|INITED)|^stat::(number_of_executed_units|peak_rss)|ERROR|SUMMARY|Test unit written'; \
	done; \
	found=$$(ls build-fuzz/files-*-crash-* build-fuzz/files-*-leak-* build-fuzz/files-*-timeout-* \
	  build-fuzz/files-*-oom-* 2>/dev/null); \
	test -z "$$found" || { echo "fuzz-files found:" $$found; exit 1; }

fuzz-files-replay: build-fuzz/fuzz-files build-fuzz/seeds-files
	@n=$$(ls tests/fuzz/corpus/files build-fuzz/seeds-files | wc -l); \
	if $(FUZZ_FILES_ENV) build-fuzz/fuzz-files -timeout=10 -rss_limit_mb=2048 tests/fuzz/corpus/files/* build-fuzz/seeds-files/* \
	  >build-fuzz/replay-files.log 2>&1; then echo "$$n passed, 0 failed"; \
	else tail -n 30 build-fuzz/replay-files.log; echo "0 passed, 1 failed"; fi

.PHONY: fuzz fuzz-replay
fuzz: $(FUZZERS)
	@for f in $(FUZZERS); do name=$${f#build-fuzz/fuzz-}; mkdir -p build-fuzz/corpus/$$name; \
	  dict=; test -f tests/fuzz/$$name.dict && dict=-dict=tests/fuzz/$$name.dict; \
	  echo "== $$f for $(FUZZ_SECONDS) s"; \
	  OMP_WAIT_POLICY=passive $$f -max_total_time=$(FUZZ_SECONDS) -timeout=20 -close_fd_mask=3 \
	    -print_final_stats=1 $$dict -artifact_prefix=build-fuzz/$$name- \
	    build-fuzz/corpus/$$name tests/fuzz/corpus/$$name \
	    2>&1 | grep -E '^#[0-9]+.*(DONE|INITED)|^stat::(number_of_executed_units|peak_rss)|ERROR|SUMMARY|Test unit written'; \
	  found=$$(ls build-fuzz/$$name-crash-* build-fuzz/$$name-leak-* build-fuzz/$$name-timeout-* \
	    build-fuzz/$$name-oom-* 2>/dev/null); \
	  test -z "$$found" || { echo "$$f found:" $$found; exit 1; }; \
	done

fuzz-replay: $(FUZZERS)
	@for f in $(FUZZERS); do name=$${f#build-fuzz/fuzz-}; \
	  $$f -close_fd_mask=3 -runs=0 tests/fuzz/corpus/$$name || exit 1; done

# Benchmarks and quality scripts (never part of `make check`): Python with
# OpenCV and numpy, Debian's python3-opencv on the CPU machine.
PYTHON3    ?= /usr/bin/python3
BENCH_ARGS ?=

bench: $(SHLIB)
	$(PYTHON3) bench/bench.py $(BENCH_ARGS)

# Each tests/quality/*.py in order; all run, the target fails if any did.
quality: $(SHLIB)
	@failed=0; for f in $(sort $(wildcard tests/quality/*.py)); do \
	  echo "== $$f"; $(PYTHON3) $$f || { echo "== $$f FAILED"; failed=$$((failed + 1)); }; \
	done; \
	if [ -z "$(wildcard tests/quality/*.py)" ]; then echo "no tests/quality/*.py yet"; fi; \
	test $$failed -eq 0

# GIMP 3 plug-in: compiled and linked inside a Debian 13 chroot that
# tests/gimp/chroot.sh creates once (root, network to the host's Debian mirror)
# and keeps outside the clone; the engine library comes from the host.
# The dialogs are a module of their own (libgimpui, GTK) that the plug-in
# loads only for interactive runs; the plug-in exports the engine and the
# toolkit-free rest of ui/ (procedure values, region I/O, config reading,
# the dialogs' texts) to it. The module sees no plugin/ header.
GIMP3_UI_SRCS := ui/gimp3/dialog.c
GIMP3_SRCS := $(filter-out $(GIMP3_UI_SRCS),$(wildcard plugin/gimp3/*.c ui/gimp3/*.c ui/common/*.c))
GIMP3_UI_HDRS := $(wildcard ui/gimp3/*.h ui/common/*.h)
GIMP3_HDRS := $(wildcard plugin/gimp3/*.h) $(GIMP3_UI_HDRS)
GIMP3_UI_INC := -Icore -Iui/common -Iui/gimp3
GIMP3_INC  := $(GIMP3_UI_INC) -Iplugin/gimp3

$(BUILD)/gimp3/cudafx: $(GIMP3_SRCS) $(GIMP3_HDRS) core/cudafx.h $(LIB) \
                       tools/build-gimp3.sh tests/gimp/chroot.sh
	tools/build-gimp3.sh $@ $(LIB) "$(LIB_LIBS)" "$(GIMP3_INC)" $(GIMP3_SRCS) $(GIMP3_HDRS)

$(BUILD)/gimp3/cudafx-dialogs.so: $(GIMP3_UI_SRCS) $(GIMP3_UI_HDRS) core/cudafx.h \
                                  tools/build-gimp3.sh tests/gimp/chroot.sh
	tools/build-gimp3.sh --dialogs $@ "$(GIMP3_UI_INC)" $(GIMP3_UI_SRCS) $(GIMP3_UI_HDRS)

# The GEGL operations module for GIMP 3, built in the same chroot against its GEGL.
$(BUILD)/gimp3/cudafx-gegl.so: $(GEGL_MODULE_SRCS) $(GEGL_MODULE_HDRS) $(LIB) \
                               tools/build-gimp3.sh tests/gimp/chroot.sh
	tools/build-gimp3.sh --module $@ $(LIB) "$(LIB_LIBS)" "$(GEGL_MODULE_INC)" \
	  $(GEGL_MODULE_SRCS) $(GEGL_MODULE_HDRS)

plugin: $(BUILD)/gimp3/cudafx $(BUILD)/gimp3/cudafx-dialogs.so $(BUILD)/gimp3/cudafx-gegl.so locale

# The GIMP the chroot has: 3.0 (Debian 13) or 3.2 (Debian forky), each its own
# chroot (tests/gimp/chroot.sh). The stamp rebuilds the three products above
# when the version changes, so a build folder never tests one GIMP's build in
# the other.
CUDAFX_GIMP3_VERSION ?= 3.0
export CUDAFX_GIMP3_VERSION
GIMP3_STAMP := $(BUILD)/gimp3/.gimp-$(CUDAFX_GIMP3_VERSION)
$(BUILD)/gimp3/cudafx $(BUILD)/gimp3/cudafx-dialogs.so $(BUILD)/gimp3/cudafx-gegl.so: $(GIMP3_STAMP)
$(GIMP3_STAMP):
	@mkdir -p $(@D); rm -f $(@D)/.gimp-*; touch $@

# The same plug-in built natively where the system has GIMP 3's development
# files (libgimp-3.0-dev); install.sh uses it.
$(BUILD)/gimp3-native/cudafx: $(GIMP3_SRCS) $(GIMP3_HDRS) core/cudafx.h $(LIB)
	@pkg-config --exists gimpui-3.0 || { echo "plugin-3-native needs GIMP 3's development files (libgimp-3.0-dev)"; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Werror=implicit-function-declaration $(GIMP3_INC) -Wl,--export-dynamic \
	  $$(pkg-config --cflags gimp-3.0) $(GIMP3_SRCS) -Wl,--whole-archive $(LIB) -Wl,--no-whole-archive \
	  $$(pkg-config --libs gimp-3.0) $(LIB_LIBS) -o $@

$(BUILD)/gimp3-native/cudafx-dialogs.so: $(GIMP3_UI_SRCS) $(GIMP3_UI_HDRS) core/cudafx.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -fPIC -Werror=implicit-function-declaration $(GIMP3_UI_INC) \
	  $$(pkg-config --cflags gimpui-3.0) $(GIMP3_UI_SRCS) $$(pkg-config --libs gimpui-3.0) -o $@

.PHONY: plugin-3-native
plugin-3-native: $(BUILD)/gimp3-native/cudafx $(BUILD)/gimp3-native/cudafx-dialogs.so locale

# Headless GIMP 3 tests of the plug-in, then of the GEGL operations as live
# filters, then every bad value a script can give them (in the chroot); each
# suite ends with "N passed, N failed".
# `make check-gimp CUDAFX_GIMP3_VERSION=3.2` runs them against GIMP 3.2.
check-gimp: plugin $(CLI)
	@tests/gimp/run.sh $(BUILD); status=$$?; tests/gimp/live.sh $(BUILD) || status=1; \
	  tests/gimp/hostile.sh $(BUILD) && exit $$status

# GIMP 2.10 plug-in: built natively (Debian 12: libgimp2.0-dev) against the
# engine library; tests drive gimp-console-2.10 on the host. GTK 2's headers
# use GLib types GLib now deprecates: those warnings are not ours.
GIMP210_SRCS := $(wildcard plugin/gimp210/*.c ui/gimp210/*.c ui/common/*.c)
GIMP210_HDRS := $(wildcard plugin/gimp210/*.h ui/gimp210/*.h ui/common/*.h)

$(BUILD)/gimp210/cudafx: $(GIMP210_SRCS) $(GIMP210_HDRS) core/cudafx.h $(LIB)
	@pkg-config --exists gimpui-2.0 || { echo "plugin-210 needs GIMP 2.10's development files (libgimp2.0-dev)"; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Werror=implicit-function-declaration -Icore -Iui/common -Iui/gimp210 -Iplugin/gimp210 \
	  -DGLIB_DISABLE_DEPRECATION_WARNINGS $$(pkg-config --cflags gimpui-2.0) $(GIMP210_SRCS) $(LIB) $$(pkg-config --libs gimpui-2.0) \
	  $(LIB_LIBS) -o $@

# The plug-in's procedure table (engine arguments, then the hosts' own) as a
# library for scripts that write GIMP 2.10 calls (tests/gimp210/procargs.py).
$(BUILD)/libcudafx-procedures.so: ui/common/procedures.c ui/common/procedures.h core/cudafx.h $(CORE_OBJS) $(CUDA_OBJS)
	$(CC) $(CFLAGS) -shared -Icore -Iui/common $$(pkg-config --cflags glib-2.0) ui/common/procedures.c \
	  $(CORE_OBJS) $(CUDA_OBJS) $$(pkg-config --libs glib-2.0) $(LIB_LIBS) -o $@

.PHONY: plugin-210 check-gimp210
plugin-210: $(BUILD)/gimp210/cudafx $(BUILD)/libcudafx-procedures.so locale

# Headless GIMP 2.10 tests of the plug-in; ends with "N passed, N failed".
check-gimp210: plugin-210 all
	tests/gimp210/run.sh $(BUILD)

# The five GIMP 2.10 dialogs on screen (host GIMP under Xvfb), saved as docs/screenshots/gimp210-<filter>.png; needs xvfb,
# xdotool and imagemagick.
.PHONY: screenshots-210
screenshots-210: plugin-210 all
	tests/gimp210/screenshots.sh $(BUILD)

# What `make` built, for the user (GIMP's and GEGL's folders in $$HOME, the CLI
# in ~/.local/bin) or, with PREFIX (and DESTDIR), system-wide; never apt-get.
# install.sh is a user's whole set-up: packages, build, this, a smoke run.
install: all
	tools/install-files.sh $(BUILD)

# The Debian package (debian/; `dpkg-buildpackage -us -uc -b`) built, linted,
# installed, used from GIMP 3 and gegl, and removed in a fresh Debian 13 root
# (tests/package/run.sh: root, the Debian mirror). Ends with "N passed, N failed".
.PHONY: check-package
check-package:
	tests/package/run.sh

# The dialogs for the README, under Xvfb: GIMP 3's five from the chroot
# (docs/screenshots/gimp3-<filter>.png) and its Non-Local Means in Spanish
# (gimp3-nl-means-es.png), a live filter's dialog with its split preview and
# the layer's effects after it (gimp3-live-split.png, gimp3-live-effects.png),
# live nl-means' dialog with the σ it found (gimp3-live-nl-means.png),
# then GIMP 2.10's when its script exists
# (tests/gimp210/screenshots.sh BUILD OUTDIR, same naming with gimp210-).
.PHONY: screenshots check-dialogs
screenshots: plugin
	tests/gimp/screenshots.sh $(BUILD) docs/screenshots
	tests/gimp/screenshots.sh --lang es_ES $(BUILD) docs/screenshots
	tests/gimp/live-gui.sh $(BUILD) docs/screenshots
	if [ -x tests/gimp210/screenshots.sh ]; then tests/gimp210/screenshots.sh $(BUILD) docs/screenshots; fi

# The GIMP 3 dialogs opened under Xvfb with nobody at the keyboard: each
# preview must show the CLI's result for the dialog's settings; then undo
# after a merged live filter, typed as a user does, and the σ live nl-means'
# dialog shows (tests/gimp/live-gui.sh).
# About 5 minutes here; not in CI. Each ends with "N passed, N failed".
check-dialogs: plugin all
	rm -rf $(BUILD)/dialog-shots
	tests/gimp/screenshots.sh --both $(BUILD) $(BUILD)/dialog-shots
	$(PYTHON3) tests/gimp/check-dialogs.py $(BUILD)/dialog-shots $(BUILD)/cudafx
	tests/gimp/live-gui.sh $(BUILD)

clean:
	rm -rf build build-asan build-gpu build-fuzz

# The main job on a fresh Debian machine: dependencies, build, and the five
# filters through the CLI on tests/data/astronaut.png, results in out/.
DEMO_IN := tests/data/astronaut.png
.PHONY: demo
demo:
	bash tools/install-deps.sh
	$(MAKE) --no-print-directory all
	@mkdir -p out
	$(BUILD)/cudafx median --radius 3 --json $(DEMO_IN) out/median.png
	$(BUILD)/cudafx nl-means --json $(DEMO_IN) out/nl-means.png
	$(BUILD)/cudafx nl-bayes --json $(DEMO_IN) out/nl-bayes.png
	$(BUILD)/cudafx quantize --colors 16 --palette-out out/quantize.gpl --json $(DEMO_IN) out/quantize.png
	$(BUILD)/cudafx convolve --preset sharpen-5x5 --json $(DEMO_IN) out/convolve.png
	@echo "demo: results in out/ (median.png nl-means.png nl-bayes.png quantize.png quantize.gpl convolve.png)"

# The CLI end to end (bench/bench_e2e.py): one 12 MP JPEG and a batch of
# them, file in to file out, beside the codecs alone (cudafx-bench) and
# OpenCV. On the GPU machine run the script with a gegl-bundle of both
# (README, Performance).
BENCH_E2E_ARGS ?= --images 8 --opencv-images 1
.PHONY: bench-e2e
bench-e2e: $(CLI) $(CLI_BENCH)
	$(PYTHON3) bench/bench_e2e.py --cli $(CLI) $(BENCH_E2E_ARGS)

# The header dependencies the compilers wrote (absent before the first build).
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
