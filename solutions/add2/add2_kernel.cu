// Solution — add2: c = a + b for n x n float32 matrices, as a memory-bound elementwise kernel.
// The matrices are contiguous, so their n * n elements are one flat array: each thread adds one 16-byte
// float4 of a and b (a quarter of the load instructions of one float per thread), the last n*n % 4
// elements one at a time by the first threads. One float4 per thread, 256 threads per block, enough
// blocks for all of them: a full GPU keeps enough bytes in flight to run at copy bandwidth.
// Any pointer off 16 bytes (not from torch's allocator) takes the one-float kernel.
#include <cstdint>

#include "add2.h"

constexpr int THREADS = 256;

__global__ void __launch_bounds__(THREADS) MatAdd(float* __restrict__ c, const float* __restrict__ a,
                                                  const float* __restrict__ b, int n) {
    const long long total = (long long)n * n;
    const long long vectors = total / 4;
    const long long t = (long long)blockIdx.x * THREADS + threadIdx.x;
    if (t < vectors) {
        const float4 x = reinterpret_cast<const float4*>(a)[t];
        const float4 y = reinterpret_cast<const float4*>(b)[t];
        reinterpret_cast<float4*>(c)[t] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    const long long tail = vectors * 4 + t;  // the last 0-3 elements: threads 0-2 of block 0
    if (tail < total) c[tail] = a[tail] + b[tail];
}

__global__ void __launch_bounds__(THREADS) MatAddScalar(float* __restrict__ c, const float* __restrict__ a,
                                                        const float* __restrict__ b, int n) {
    const long long total = (long long)n * n;
    const long long t = (long long)blockIdx.x * THREADS + threadIdx.x;
    if (t < total) c[t] = a[t] + b[t];
}

void launch_add2(float* c, const float* a, const float* b, int n, cudaStream_t stream) {
    const long long total = (long long)n * n;
    if (total == 0) return;
    const bool aligned = ((reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b)
                           | reinterpret_cast<std::uintptr_t>(c)) % 16) == 0;
    if (aligned) {
        const long long blocks = (total / 4 + THREADS - 1) / THREADS;
        MatAdd<<<(unsigned)(blocks > 0 ? blocks : 1), THREADS, 0, stream>>>(c, a, b, n);
    } else {
        MatAddScalar<<<(unsigned)((total + THREADS - 1) / THREADS), THREADS, 0, stream>>>(c, a, b, n);
    }
}
