// Week 2 — parallel sum reduction.
//
// x and out are DEVICE pointers; out points to one float that holds garbage when you are called.
// See README.md for a path from a correct kernel to one near the memory roofline.
// Grade with: kcourse grade week2 reduction
#include <cuda_runtime.h>

__global__ void sum_kernel(const float* x, float* out, int n) {
    // TODO: each block sums a part of x (shared memory or warp shuffles),
    //       then adds its partial sum into *out with atomicAdd.
}

extern "C" void reduction(const float* x, float* out, int n) {
    // TODO: set *out to 0 (cudaMemsetAsync), then launch sum_kernel.
}
