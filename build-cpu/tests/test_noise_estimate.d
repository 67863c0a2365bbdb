build-cpu/tests/test_noise_estimate.o: tests/unit/test_noise_estimate.c \
 tests/unit/harness.h tests/unit/../../core/cudafx.h
tests/unit/harness.h:
tests/unit/../../core/cudafx.h:
