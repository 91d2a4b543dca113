// Week 1 — hello CUDA: every thread writes its own global index.
//
// ids, row_idx and col_idx are DEVICE pointers to int32 arrays that hold garbage when you are called:
//   ids      n ints                          ids[i] = i
//   row_idx  rows x cols ints, row-major     row_idx[r * cols + c] = r
//   col_idx  rows x cols ints, row-major     col_idx[r * cols + c] = c
// Sizes are ragged (n = 1, 7, 98765, rows = 37 with cols = 1001, ...): see README.md for the index
// arithmetic and the mistakes the grader looks for. Grade with: kcourse grade hello_cuda
#include <cuda_runtime.h>

__global__ void ids_1d(int* ids, int n) {
    // TODO: i = this thread's global index, from blockIdx.x, blockDim.x and threadIdx.x;
    //       if i < n, write ids[i] = i.
}

__global__ void ids_2d(int* row_idx, int* col_idx, int rows, int cols) {
    // TODO: the column from the x dimension and the row from the y dimension (x varies fastest within
    //       a warp, so neighbouring threads write neighbouring addresses); if the row and the column are
    //       both in range, write row_idx[row * cols + col] = row and col_idx[row * cols + col] = col.
}

extern "C" void hello_cuda(int* ids, int* row_idx, int* col_idx, int n, int rows, int cols) {
    // TODO 1: launch ids_1d<<<blocks, threads>>> with threads = 256 and enough blocks to cover n
    //         (round up: n / threads rounds down).
    // TODO 2: launch ids_2d on a 2-D grid: dim3 threads(32, 8), and dim3 blocks covering cols along x
    //         and rows along y (round both up).
}
