build-cpu/tests/test_convolve.o: tests/unit/test_convolve.c \
 tests/unit/harness.h tests/unit/../../core/cudafx.h
tests/unit/harness.h:
tests/unit/../../core/cudafx.h:
