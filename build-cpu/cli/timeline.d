build-cpu/cli/timeline.o: cli/timeline.c cli/timeline.h \
 cli/../core/cudafx.h cli/batch.h
cli/timeline.h:
cli/../core/cudafx.h:
cli/batch.h:
