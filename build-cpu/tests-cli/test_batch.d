build-cpu/tests-cli/test_batch.o: tests/cli-unit/test_batch.c \
 tests/cli-unit/../unit/harness.h \
 tests/cli-unit/../unit/../../core/cudafx.h \
 tests/cli-unit/../../cli/batch.h tests/cli-unit/../../cli/image_pool.h
tests/cli-unit/../unit/harness.h:
tests/cli-unit/../unit/../../core/cudafx.h:
tests/cli-unit/../../cli/batch.h:
tests/cli-unit/../../cli/image_pool.h:
