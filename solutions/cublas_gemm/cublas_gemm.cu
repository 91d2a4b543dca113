// Day 19 — C = A B with cuBLAS, float32 (instructor solution).
//
// cuBLAS is column-major: a row-major R x S matrix with row stride ld is, to cuBLAS, the S x R matrix of its
// transpose with leading dimension ld. So the row-major product C = A B is the column-major product
// C^T = B^T A^T, with no data moved: pass B first, A second, the sizes as (N, M, K), and the row strides as
// the leading dimensions. One handle, made on the first call; alpha and beta are host scalars (the default
// pointer mode). cublasSgemm is the same kernel torch.matmul runs for float32.
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

static void ok(cublasStatus_t status, const char* call, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "cublas_gemm.cu:%d: %s: %s\n", line, call, cublasGetStatusString(status));
    abort();
}
#define CUBLAS_OK(call) ok((call), #call, __LINE__)

static cublasHandle_t the_handle() {
    static cublasHandle_t handle = [] {
        cublasHandle_t created;
        CUBLAS_OK(cublasCreate(&created));
        return created;
    }();  // created once, on the first call (thread-safe)
    return handle;
}

extern "C" void gemm(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb, int ldc) {
    const float one = 1.0f, zero = 0.0f;
    // column-major (N x M) = (N x K) (K x M): C^T = B^T A^T
    CUBLAS_OK(cublasSgemm(the_handle(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, ldb, A, lda, &zero, C, ldc));
}
