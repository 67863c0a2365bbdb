build-cpu/core/nlmeans.o: core/nlmeans.c core/cpu.h core/backend.h \
 core/convolve.h core/cudafx.h core/services.h core/i18n.h core/nlbayes.h \
 core/nlmeans.h core/quantize.h core/engine.h core/nlmeans_noise.h \
 core/noise_estimate.h
core/cpu.h:
core/backend.h:
core/convolve.h:
core/cudafx.h:
core/services.h:
core/i18n.h:
core/nlbayes.h:
core/nlmeans.h:
core/quantize.h:
core/engine.h:
core/nlmeans_noise.h:
core/noise_estimate.h:
