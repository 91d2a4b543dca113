// Day 3 — 2-D matrix addition: c = a + b, one thread per element on a 2-D grid of threads.
//
// a, b and c are DEVICE pointers to rows x cols float32 matrices, row-major; c holds garbage when you
// are called. Each matrix may be a slice of a wider one, so each has its own row stride (in elements,
// >= cols): element (row, col) of a is a[row * a_stride + col] — use the stride, not cols, to step
// between rows. Sizes are ragged (1 x 1, 7 x 13, 1000 x 1001, 70001 x 5, ...): see README.md.
// Grade with: kcourse grade matrix_add
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* c, int rows, int cols, int a_stride, int b_stride,
                           int c_stride) {
    // TODO: col from the x dimension (blockIdx.x, blockDim.x, threadIdx.x), row from the y dimension;
    //       x varies fastest within a warp, so with col on x a warp reads 32 neighbouring floats of a row.
    // TODO: if row < rows and col < cols:
    //       c[row * c_stride + col] = a[row * a_stride + col] + b[row * b_stride + col];
}

extern "C" void matrix_add(const float* a, const float* b, float* c, int rows, int cols, int a_stride, int b_stride,
                           int c_stride) {
    // TODO: dim3 threads(32, 8); dim3 blocks covering cols along x and rows along y (round both up:
    //       (cols + 31) / 32, (rows + 7) / 8); then add_kernel<<<blocks, threads>>>(...).
}
