build-cpu/core/noise_estimate.o: core/noise_estimate.c \
 core/noise_estimate.h core/cudafx.h core/engine.h core/services.h \
 core/i18n.h
core/noise_estimate.h:
core/cudafx.h:
core/engine.h:
core/services.h:
core/i18n.h:
