// Histogram — count int32 values into 256 bins with atomics.
//
// x (n ints, each in [0, 256)) and counts (256 ints) are DEVICE pointers; counts holds garbage when you
// are called. Write counts[v] = how many i have x[i] == v, for every v in 0 .. 255 (0 for an empty bin).
// n runs from 1 to 2^28 + 3; some inputs put every value in one bin. See README.md for a path from a
// correct kernel to one at the memory roofline. Grade with: kcourse grade histogram
#include <cuda_runtime.h>

#ifndef THREADS  // `kcourse tune histogram` rebuilds with -DTHREADS=256, 512, 1024
#define THREADS 256
#endif

__global__ void histogram_kernel(const int* x, int* counts, int n) {
    // TODO: i = this thread's global index; if i < n, atomicAdd(&counts[x[i]], 1).
    //       Faster (README step 2): count into a __shared__ int[256] per block first (zero it and
    //       __syncthreads() before, __syncthreads() after), then add each bin to counts once.
}

extern "C" void histogram(const int* x, int* counts, int n) {
    // TODO: zero counts (cudaMemsetAsync(counts, 0, 256 * sizeof(int))), then launch histogram_kernel
    //       with enough THREADS-thread blocks to cover n (round up).
}
