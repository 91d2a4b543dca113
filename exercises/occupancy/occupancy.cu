// Day 23 — occupancy. Read README.md in this folder. Grade with: kcourse grade occupancy
//
// flip_rows reverses every row of a rows x cols float32 matrix: y[r][c] = x[r][cols - 1 - c].
// The kernel below is CORRECT — it passes numerics — and slow: it fails the speed bar. Grade it once and
// read the build check: nvcc's resource report, then its occupancy line, e.g.
//   occupancy of flip_rows_kernel: 4 blocks of 32 threads per SM → 4 of 64 warps = 6.2% (limited by shared memory ...)
// A memory-bound kernel hides the memory's latency with many loads in flight; 4 warps per SM, each
// waiting on one load at a time, cannot keep enough bytes moving. Your job: keep it correct and make it
// fast, by raising the occupancy (and then the bytes each thread has in flight). See the README's ladder.
#include <cuda_runtime.h>

#define THREADS 32       // threads per block: one warp
#define MAX_COLS 12288   // the longest row a block can stage: 12288 floats = 48 KB of shared memory

// One block per row: the block copies its row into shared memory, waits for all its threads, then writes
// it back reversed. TODO (occupancy): this 48 KB array fits 4 blocks on an SM, and 4 blocks of 32
// threads are 4 warps out of 64. Is the staging needed at all? (A warp reading 32 neighbouring floats
// in descending order still touches the same 128-byte lines: coalesced.)
__global__ void __launch_bounds__(THREADS) flip_rows_kernel(const float* x, float* y, int cols) {
    __shared__ float row[MAX_COLS];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += THREADS) row[c] = in[c];
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += THREADS) out[c] = row[cols - 1 - c];
}

// x and y are device pointers to rows x cols float32 matrices stored row by row (cols <= MAX_COLS here).
extern "C" void flip_rows(const float* x, float* y, int rows, int cols) {
    if (rows == 0 || cols == 0) return;
    // TODO (block size): 32 threads per block; with the staging gone, what block size fills an SM?
    flip_rows_kernel<<<rows, THREADS>>>(x, y, cols);
}
