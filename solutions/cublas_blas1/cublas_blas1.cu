// Day 17 — using cuBLAS: dot, axpy, amax and amin, float32 (instructor solution).
//
// One handle, created on the first call and kept: cublasCreate allocates and initialises the library's
// state, which costs more than the six calls below at most sizes. Results go straight to device memory
// (CUBLAS_POINTER_MODE_DEVICE), so nothing waits on the GPU; alpha is a host float, passed in host mode.
// cuBLAS's own reductions read each vector at close to the memory bandwidth: the whole call moves 9n
// floats. The two 1-based indices become 0-based in one tiny kernel.
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

// A failed call stops the process with its line (the grader reports the crash and this output).
static void ok(cublasStatus_t status, const char* call, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "cublas_blas1.cu:%d: %s: %s\n", line, call, cublasGetStatusString(status));
    abort();
}
#define CUBLAS_OK(call) ok((call), #call, __LINE__)

static cublasHandle_t the_handle() {
    static cublasHandle_t handle = [] {
        cublasHandle_t created;
        CUBLAS_OK(cublasCreate(&created));
        return created;
    }();  // a function-local static: created once, on the first call, thread-safely
    return handle;
}

// BLAS indices count from 1 (Fortran); C counts from 0.
__global__ void to_zero_based(int* amax, int* amin) {
    *amax -= 1;
    *amin -= 1;
}

extern "C" void blas1(const float* x, const float* y, float* dot, float* axpy, int* amax, int* amin, int n,
                      float alpha) {
    cublasHandle_t handle = the_handle();
    CUBLAS_OK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));  // alpha lives on the host
    CUBLAS_OK(cublasScopy(handle, n, y, 1, axpy, 1));
    CUBLAS_OK(cublasSaxpy(handle, n, &alpha, x, 1, axpy, 1));
    CUBLAS_OK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE));  // results stay on the GPU
    CUBLAS_OK(cublasSdot(handle, n, x, 1, y, 1, dot));
    CUBLAS_OK(cublasIsamax(handle, n, x, 1, amax));
    CUBLAS_OK(cublasIsamin(handle, n, x, 1, amin));
    to_zero_based<<<1, 1>>>(amax, amin);
    CUBLAS_OK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
}
