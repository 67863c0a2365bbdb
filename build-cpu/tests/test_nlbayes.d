build-cpu/tests/test_nlbayes.o: tests/unit/test_nlbayes.c \
 tests/unit/harness.h tests/unit/../../core/cudafx.h
tests/unit/harness.h:
tests/unit/../../core/cudafx.h:
