// Day 7 — 1-D convolution with zero padding.
//
// x (n floats), w (2r + 1 floats) and out (n floats) are DEVICE pointers; out holds garbage when you
// are called. Compute, for every 0 <= i < n,
//     out[i] = w[0] * x[i - r] + w[1] * x[i - r + 1] + ... + w[2r] * x[i + r]
// where x[j] counts as 0 for j < 0 and j >= n (zero padding: out is as long as x).
// r runs from 0 to 32; n from 1 to 2^26 + 3. See README.md for a path from a correct kernel to one at the
// memory roofline. Grade with: kcourse grade conv1d
#include <cuda_runtime.h>

__global__ void conv1d_kernel(const float* x, const float* w, float* out, int n, int r) {
    // TODO: i = this thread's global index; if i < n, sum w[k] * x[i + k - r] over k = 0 .. 2r,
    //       skipping (or counting as 0) the taps whose x index is outside [0, n); write out[i].
}

extern "C" void conv1d(const float* x, const float* w, float* out, int n, int r) {
    // TODO: launch conv1d_kernel with enough 256-thread blocks to cover n (round up).
}
