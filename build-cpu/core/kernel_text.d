build-cpu/core/kernel_text.o: core/kernel_text.c core/engine.h \
 core/services.h core/cudafx.h core/i18n.h
core/engine.h:
core/services.h:
core/cudafx.h:
core/i18n.h:
