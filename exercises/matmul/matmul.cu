// Week 2 — shared-memory tiled matrix multiplication, float32, row-major.
//
// A (M x K), B (K x N) and C (M x N) are DEVICE pointers. See README.md.
// Grade with: kcourse grade week2 matmul
#include <cuda_runtime.h>

#ifndef TILE  // `kcourse tune matmul` rebuilds with -DTILE=8, 16, 32
#define TILE 32
#endif

__global__ void matmul_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    // TODO: load TILE x TILE tiles of A and B into __shared__ arrays (0 where out of range),
    //       __syncthreads(), accumulate, __syncthreads(), next tile; finally write C if in range.
}

extern "C" void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    // TODO: launch matmul_kernel on a grid of (ceil(N / TILE), ceil(M / TILE)) blocks of TILE x TILE threads.
}
