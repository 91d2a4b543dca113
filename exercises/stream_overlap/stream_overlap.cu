// Week 3 — overlap copies and compute with CUDA streams.
//
// The grader calls stream_overlap() with HOST pointers to pinned (page-locked) memory: you copy the
// data to the GPU, run transform_kernel on it and copy the result back, as in week 1 — but in chunks,
// on n_streams streams, so that copying one chunk overlaps computing another. The grader also runs
// your function with n_streams = 1 and reports how much faster your n_streams version is.
// Read README.md in this folder for the steps. Grade with: kcourse grade week3 stream_overlap
#include <cstdio>
#include <cuda_runtime.h>

#define NEWTON_STEPS 512

// GIVEN — do not change it: it stands for real per-element work (a simulation step, a per-pixel
// solver). It computes y = 1 / sqrt(1 + x^2) by Newton's method, r <- r * (1.5 - s/2 * r^2), taking far
// more steps than it needs (a few dozen at most) so that on an H100 the kernel takes about as
// long as copying its data over PCIe: then overlapping the two pays.
__global__ void transform_kernel(const float* x, float* y, int count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float s = fmaf(x[i], x[i], 1.0f);
    float half_s = 0.5f * s;
    float r = 1.0f / s;  // below 1/sqrt(s): every step climbs towards it
#pragma unroll 8
    for (int k = 0; k < NEWTON_STEPS; ++k) r = r * fmaf(-half_s, r * r, 1.5f);
    y[i] = r;
}

extern "C" void stream_overlap(const float* x, float* y, int n, int n_streams) {
    // TODO 1: cudaMalloc device buffers d_x and d_y of n floats each.
    // TODO 2: create n_streams streams (cudaStreamCreate, or cudaStreamCreateWithFlags(..., cudaStreamNonBlocking)).
    // TODO 3: cut [0, n) into chunks — more chunks than streams, the last one shorter when n does not divide —
    //         and for chunk c, in stream c % n_streams:
    //           cudaMemcpyAsync(d_x + start, x + start, bytes, cudaMemcpyHostToDevice, stream);
    //           transform_kernel<<<blocks, 256, 0, stream>>>(d_x + start, d_y + start, count);
    //           cudaMemcpyAsync(y + start, d_y + start, bytes, cudaMemcpyDeviceToHost, stream);
    // TODO 4: wait for every stream (cudaStreamSynchronize), then cudaStreamDestroy them.
    // TODO 5: cudaFree the device buffers.
    // While you debug, check what each CUDA call returns: print cudaGetErrorString(err) when it is not
    // cudaSuccess (a small macro around each call does it), and call cudaGetLastError() after the launches.
}
