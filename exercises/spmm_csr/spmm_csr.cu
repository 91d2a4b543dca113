// SpMM — C = A B for a sparse matrix A in CSR form and a dense matrix B.
//
// All pointers are DEVICE pointers. A is M x K with nnz entries: row r's entries are
// values[row_ptr[r] .. row_ptr[r+1]), in columns col_idx[...] (row_ptr has M + 1 ints, from 0 to nnz).
// B is K x N and C is M x N, both float32, row-major. C holds garbage when you are called: write every
// element, the rows with no entries too (they are 0). One row of A is far longer than the rest.
// See README.md for a path from one thread per output to a load-balanced kernel.
// Grade with: kcourse grade spmm_csr
#include <cuda_runtime.h>

__global__ void spmm_kernel(const int* row_ptr, const int* col_idx, const float* values, const float* B, float* C,
                            int M, int N) {
    // TODO: row r = blockIdx.x, column j = blockIdx.y * blockDim.x + threadIdx.x (if j < N):
    //       sum = 0; for k in row_ptr[r] .. row_ptr[r+1]-1: sum += values[k] * B[col_idx[k] * N + j];
    //       C[r * N + j] = sum (0 for an empty row: write it anyway).
}

extern "C" void spmm_csr(const int* row_ptr, const int* col_idx, const float* values, const float* B, float* C,
                         int M, int K, int N, int nnz) {
    // TODO: launch spmm_kernel on a grid of dim3(M, ceil(N / 128)) blocks of 128 threads (rows on x:
    //       M passes 65,535, the most blocks gridDim.y may hold).
}
