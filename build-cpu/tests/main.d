build-cpu/tests/main.o: tests/unit/main.c tests/unit/harness.h \
 tests/unit/../../core/cudafx.h
tests/unit/harness.h:
tests/unit/../../core/cudafx.h:
