build-cpu/tests/test_nlmeans_noise.o: tests/unit/test_nlmeans_noise.c \
 tests/unit/harness.h tests/unit/../../core/cudafx.h
tests/unit/harness.h:
tests/unit/../../core/cudafx.h:
