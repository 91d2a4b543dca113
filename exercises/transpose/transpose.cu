// Days 6, 21-22 — matrix transpose: out[col][row] = x[row][col].
//
// x is rows x cols and out is cols x rows, both DEVICE pointers to row-major float32 matrices, each
// with its own row stride (in elements): x[row * x_stride + col], out[col * out_stride + row]. out holds
// garbage when you are called. Sizes are ragged (7 x 13, 1000 x 1001, 70001 x 3, ...).
//
// Start with the naive kernel (one thread per element), make it correct, then follow README.md's
// ladder: a shared-memory tile so that reads AND writes are coalesced, then TILE + 1 padding against
// bank conflicts. The speed bar needs all of it. Grade with: kcourse grade transpose
#include <cuda_runtime.h>

#define TILE 32

__global__ void transpose_kernel(const float* x, float* out, int rows, int cols, int x_stride, int out_stride) {
    // TODO (naive): col from x (blockIdx.x * blockDim.x + threadIdx.x), row from y; if both in range,
    //       out[col * out_stride + row] = x[row * x_stride + col];
    //       Reads are coalesced (a warp reads 32 neighbouring floats of a row of x), writes are not
    //       (32 floats out_stride apart): correct, and about a third of the memory's bandwidth.
    // TODO (tiled): __shared__ float tile[TILE][TILE + 1];
    //       1. read a TILE x TILE block of x by rows into tile[ty][tx]
    //       2. __syncthreads(): every thread's element is in the tile before anyone reads it
    //       3. write it to out by rows: out row = this block's x column, read the tile down a column,
    //          tile[tx][ty] — with swapped block coordinates and the bounds checked for out's shape.
}

extern "C" void transpose(const float* x, float* out, int rows, int cols, int x_stride, int out_stride) {
    // TODO: dim3 threads(TILE, 8) (or (32, 32) for the naive kernel), dim3 blocks((cols + TILE - 1) / TILE,
    //       (rows + TILE - 1) / TILE); transpose_kernel<<<blocks, threads>>>(...);
}
