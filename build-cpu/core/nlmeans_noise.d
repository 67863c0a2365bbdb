build-cpu/core/nlmeans_noise.o: core/nlmeans_noise.c core/nlmeans_noise.h \
 core/nlmeans.h core/cudafx.h core/noise_estimate.h core/engine.h \
 core/services.h core/i18n.h
core/nlmeans_noise.h:
core/nlmeans.h:
core/cudafx.h:
core/noise_estimate.h:
core/engine.h:
core/services.h:
core/i18n.h:
