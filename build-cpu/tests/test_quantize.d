build-cpu/tests/test_quantize.o: tests/unit/test_quantize.c \
 tests/unit/harness.h tests/unit/../../core/cudafx.h
tests/unit/harness.h:
tests/unit/../../core/cudafx.h:
