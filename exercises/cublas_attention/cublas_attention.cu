// Day 19 — self-attention on cuBLAS, float32: out = softmax(scale * q k^T) v.
//
// q, k, v and out are DEVICE pointers to contiguous ROW-MAJOR float32 arrays of shape (B, N, d): B sequences of
// N tokens, one head of dimension d. Sequence b starts at q + (size_t)b * N * d. out holds NaN when you are
// called: write every element. Every query sees every key (no mask).
//
// The plan (README.md): the two matrix products are cuBLAS's, the softmax between them is yours.
//   1. S = scale * q k^T   (B x N x N scores)  one cublasSgemmStridedBatched
//   2. S = softmax(S) along each row, in place  your kernel: subtract the row max before expf
//   3. out = S v                                 a second cublasSgemmStridedBatched
// cuBLAS is column-major: read cublas_gemm's README (the transpose trick) before writing the calls.
// The grader links this file with -lcublas. Grade with: kcourse grade cublas_attention
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

#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        cudaError_t error_ = (call);                                                         \
        if (error_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,             \
                    cudaGetErrorString(error_));                                             \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static cublasHandle_t the_handle() {
    static cublasHandle_t handle = [] {
        cublasHandle_t created;
        CUBLAS_CHECK(cublasCreate(&created));
        return created;
    }();  // created once, on the first call (day 17)
    return handle;
}

// Row r of S (r = b * N + query) starts at S + (size_t)r * ld and holds n scores.
__global__ void softmax_rows(float* S, int n, int ld) {
    // TODO 2: turn each row into its softmax, in place, in float32:
    //         m = max of the row; p_j = expf(s_j - m); S[j] = p_j / sum of p.
    //         Without "- m" a score above 88 makes expf overflow (the grader's q x 30 cases do that).
    //         Start with one thread per row (ladder step 1), then one block per row (step 3).
}

extern "C" void cublas_attention(const float* q, const float* k, const float* v, float* out, int B, int N, int d,
                                 float scale) {
    cublasHandle_t handle = the_handle();
    const int ld = N;  // S's row stride; step 3 of the ladder rounds it up to a multiple of 4 (float4 rows)
    float* S;           // the B x N x N scores: yours to allocate, the O(N^2) memory flash attention saves
    CUDA_CHECK(cudaMallocAsync(&S, sizeof(float) * B * (size_t)N * ld, 0));

    // TODO 1: S = scale * q k^T for all B sequences in one cublasSgemmStridedBatched(handle, transa, transb,
    //         m, n, k, &alpha, A, lda, strideA, B, ldb, strideB, &beta, C, ldc, strideC, batchCount).
    //         Column-major, S = q k^T is S^T = k q^T: cuBLAS reads k's memory as k^T (d x N), so ask it to
    //         transpose that back (CUBLAS_OP_T); q's memory is q^T (d x N) as it stands (CUBLAS_OP_N).
    //         alpha = scale (the softmax's scale for free), beta = 0; strides between sequences: N * d and N * ld.
    // TODO 2: launch softmax_rows over the B * N rows of S.
    // TODO 3: out = S v, in column-major terms out^T (d x N) = v^T (d x N) S^T (N x N, leading dimension ld):
    //         a second strided-batched call, alpha = 1, beta = 0.

    CUDA_CHECK(cudaFreeAsync(S, 0));
}
