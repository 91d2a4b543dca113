// Day 8 — matrix-vector product, float32: y = A x.
//
// A (M x K, row-major), x (K floats) and y (M floats) are DEVICE pointers; y holds garbage when you are
// called. Row m of A starts at A + m * lda: lda (A's row stride, in elements) is K for a plain matrix and
// larger when A is a slice of a wider one, so step between rows with lda, never with K.
// See README.md for a path from a correct kernel to one at the memory roofline.
// Grade with: kcourse grade matvec
#include <cuda_runtime.h>

__global__ void matvec_kernel(const float* A, const float* x, float* y, int M, int K, int lda) {
    // TODO: one warp per row: row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32.
    //       Each lane sums A[row * lda + k] * x[k] for k = lane, lane + 32, ... (neighbouring lanes read
    //       neighbouring addresses), then the warp adds its 32 partial sums with __shfl_down_sync and
    //       lane 0 writes y[row]. Rows past M do nothing.
}

extern "C" void matvec(const float* A, const float* x, float* y, int M, int K, int lda) {
    // TODO: launch matvec_kernel with 256-thread blocks (8 warps, 8 rows each) and enough blocks for M rows.
}
