// Day 19 — matrix multiplication with cuBLAS, float32: C = A B.
//
// A (M x K), B (K x N) and C (M x N) are ROW-MAJOR DEVICE matrices, as PyTorch stores them; C holds
// garbage when you are called. Row i of A starts at A + i * lda (lda = K for a plain matrix, more when A is
// a slice of a wider one); likewise ldb for B and ldc for C.
//
// cuBLAS is COLUMN-MAJOR (it comes from Fortran): it reads your row-major M x K matrix A as a K x M matrix,
// A transposed. Use that instead of fighting it: C^T = B^T A^T. See README.md.
// The grader links this file with -lcublas. Grade with: kcourse grade cublas_gemm
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CUBLAS_CHECK(call)                                                                   \
    do {                                                                                     \
        cublasStatus_t status_ = (call);                                                     \
        if (status_ != CUBLAS_STATUS_SUCCESS) {                                              \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,             \
                    cublasGetStatusString(status_));                                         \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

extern "C" void gemm(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb, int ldc) {
    // TODO 1: a cublasHandle_t created ONCE (a function-local static), not on every call.
    // TODO 2: one cublasSgemm(handle, transa, transb, m, n, k, &alpha, first, ld_first, second, ld_second,
    //         &beta, C, ldc) computing, in cuBLAS's column-major terms, the N x M matrix C^T = B^T A^T:
    //         B read by cuBLAS IS B^T (N x K, leading dimension ldb), A read by cuBLAS IS A^T (K x M, lda).
    //         alpha = 1, beta = 0 (C's garbage is then never read), no transposes (CUBLAS_OP_N).
}
