build-cpu/core/services.o: core/services.c core/services.h core/cudafx.h \
 core/i18n.h
core/services.h:
core/cudafx.h:
core/i18n.h:
