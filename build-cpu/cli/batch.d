build-cpu/cli/batch.o: cli/batch.c cli/batch.h cli/../core/i18n.h
cli/batch.h:
cli/../core/i18n.h:
