build-cpu/core/run.o: core/run.c core/engine.h core/services.h \
 core/cudafx.h core/i18n.h
core/engine.h:
core/services.h:
core/cudafx.h:
core/i18n.h:
