// Day 17 — using cuBLAS: dot product, axpy, and the indices of the largest and smallest |x[i]|, float32.
//
// x and y (n floats each) and every output are DEVICE pointers; the outputs hold garbage when you are
// called. Compute, with cuBLAS calls:
//   *dot  = x . y                                   (cublasSdot)
//   axpy  = alpha * x + y    (n floats)             (cublasScopy y into axpy, then cublasSaxpy on axpy:
//                                                    cuBLAS's axpy overwrites its y, and y is an input)
//   *amax = 0-based index of the largest |x[i]|     (cublasIsamax returns a 1-BASED index)
//   *amin = 0-based index of the smallest |x[i]|    (cublasIsamin, 1-based too)
// The grader links this file with -lcublas. See README.md for the steps, the pointer modes and why the
// handle must be created once. Grade with: kcourse grade cublas_blas1
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

// Every cuBLAS call returns a status: stop with the call's line when one fails (a wrong pointer mode or a
// bad argument shows here, not as wrong numbers later).
#define CUBLAS_CHECK(call)                                                                   \
    do {                                                                                     \
        cublasStatus_t status_ = (call);                                                     \
        if (status_ != CUBLAS_STATUS_SUCCESS) {                                              \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,             \
                    cublasGetStatusString(status_));                                         \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static cublasHandle_t get_handle() {
    // TODO: create the handle ONCE and keep it (a function-local `static`): cublasCreate costs far more
    //       than these calls at most sizes, and the grader times many calls.
    return nullptr;
}

extern "C" void blas1(const float* x, const float* y, float* dot, float* axpy, int* amax, int* amin, int n,
                      float alpha) {
    cublasHandle_t handle = get_handle();
    (void)handle;
    // TODO 1: axpy = y (cublasScopy), then axpy = alpha * x + axpy (cublasSaxpy). alpha is a host float:
    //         that needs CUBLAS_POINTER_MODE_HOST (the default).
    // TODO 2: dot, amax, amin land in device memory: switch to CUBLAS_POINTER_MODE_DEVICE first
    //         (cublasSetPointerMode): in host mode cuBLAS takes a device pointer for a host one.
    // TODO 3: the indices are 1-based: subtract 1 from *amax and *amin on the device (a tiny kernel), and
    //         put the pointer mode back to CUBLAS_POINTER_MODE_HOST for the next call.
}
