build-cpu/tests/test_nlmeans.o: tests/unit/test_nlmeans.c \
 tests/unit/harness.h tests/unit/../../core/cudafx.h
tests/unit/harness.h:
tests/unit/../../core/cudafx.h:
