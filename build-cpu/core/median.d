build-cpu/core/median.o: core/median.c core/cpu.h core/backend.h \
 core/convolve.h core/cudafx.h core/services.h core/i18n.h core/nlbayes.h \
 core/nlmeans.h core/quantize.h core/engine.h
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
