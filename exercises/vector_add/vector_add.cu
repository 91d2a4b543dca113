// Week 1 — vector addition, host side included.
//
// The grader calls vector_add() with HOST pointers: you move the data to the GPU and back yourself.
// Read README.md in this folder for the steps. Grade with: kcourse grade week1 vector_add
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
    // TODO: compute this thread's global index from blockIdx, blockDim and threadIdx,
    //       and if it is below n, write c[i] = a[i] + b[i].
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    // TODO 1: cudaMalloc device buffers d_a, d_b, d_c of n floats each.
    // TODO 2: cudaMemcpy a and b to the device (cudaMemcpyHostToDevice).
    // TODO 3: launch add_kernel over enough blocks to cover n elements.
    // TODO 4: cudaMemcpy d_c back into c (cudaMemcpyDeviceToHost).
    // TODO 5: cudaFree the device buffers.
}
