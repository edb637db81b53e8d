# Tests of the kernels module (included by tests/CMakeLists.txt when rill_kernels exists).
# The suite runs twice: as is (AVX2 where the CPU has it; every test also builds scalar
# backends explicitly) and with RILL_SIMD=scalar, which turns every RILL_SIMD_AUTO backend into
# the portable path, so both kernel families are exercised on one machine. The first run is also
# labelled `concurrency`: the matmul, attention and KV drivers split their work over 2 threads,
# which the ThreadSanitizer pass then checks.
rill_test(test_kernels SOURCES test_kernels.c LIBS rill_kernels LABELS "unit;concurrency"
          TIMEOUT 600)
add_test(NAME test_kernels_scalar COMMAND test_kernels)
set_tests_properties(test_kernels_scalar PROPERTIES TIMEOUT 600 LABELS unit
                     ENVIRONMENT "CK_FORK=no;RILL_SIMD=scalar" SKIP_RETURN_CODE 77)
