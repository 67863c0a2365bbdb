build-cpu/tests/test_engine.o: tests/unit/test_engine.c \
 tests/unit/harness.h tests/unit/../../core/cudafx.h
tests/unit/harness.h:
tests/unit/../../core/cudafx.h:
