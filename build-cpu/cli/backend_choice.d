build-cpu/cli/backend_choice.o: cli/backend_choice.c cli/backend_choice.h \
 cli/../core/cudafx.h cli/batch.h cli/image_pool.h
cli/backend_choice.h:
cli/../core/cudafx.h:
cli/batch.h:
cli/image_pool.h:
