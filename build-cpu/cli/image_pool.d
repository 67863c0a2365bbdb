build-cpu/cli/image_pool.o: cli/image_pool.c cli/image_pool.h cli/batch.h \
 cli/../core/cudafx.h
cli/image_pool.h:
cli/batch.h:
cli/../core/cudafx.h:
