// Solution — fused row softmax in CUDA: one read and one write of each element.
//
// One block per row. Each thread keeps its part of the row in registers as float4 slots (slot k of
// thread t holds columns 4(t + k·blockDim) .. +3, so a warp reads 512 contiguous bytes per slot), loaded
// with 16-byte loads when every row is 16-byte aligned (scalar loads otherwise: a row slice of a wider
// tensor, or N not a multiple of 4). The row max and the sum of exp(x - max) are block reductions: warp
// shuffles, then one shared-memory slot per warp. The block grows with the row so each thread holds
// about 16 floats; rows longer than a block's registers (over 16,384 columns) take the online softmax
// (running max and rescaled sum) in one pass, then a normalising pass.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int MAX_THREADS = 1024;
constexpr int MAX_SLOTS = 4;  // float4 slots a thread holds: rows up to 1024 · 4 · 4 = 16,384 floats stay in registers

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

// Every thread gets the block's result. Each call needs its own `partial` array: no barrier separates a
// slow warp still reading one call's partials from a fast warp writing the next call's.
__device__ __forceinline__ float block_max(float v, float* partial) {
    v = warp_max(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float total = partial[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) total = fmaxf(total, partial[w]);
    return total;
}

__device__ __forceinline__ float block_sum(float v, float* partial) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float total = partial[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) total += partial[w];
    return total;
}

__device__ __forceinline__ float max4(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }

// Columns col .. col+3 of a row; `fill` where a column is past the end. `aligned`: every row starts on
// 16 bytes and N % 4 == 0, so a slot is wholly inside the row or wholly outside it.
__device__ __forceinline__ float4 load4(const float* row, int col, int n, bool aligned, float fill) {
    if (aligned) return col < n ? __ldg(reinterpret_cast<const float4*>(row + col)) : make_float4(fill, fill, fill, fill);
    return make_float4(col < n ? __ldg(row + col) : fill, col + 1 < n ? __ldg(row + col + 1) : fill,
                       col + 2 < n ? __ldg(row + col + 2) : fill, col + 3 < n ? __ldg(row + col + 3) : fill);
}

__device__ __forceinline__ void store4(float* row, int col, int n, bool aligned, float4 v) {
    if (aligned) {
        if (col < n) *reinterpret_cast<float4*>(row + col) = v;
        return;
    }
    if (col < n) row[col] = v.x;
    if (col + 1 < n) row[col + 1] = v.y;
    if (col + 2 < n) row[col + 2] = v.z;
    if (col + 3 < n) row[col + 3] = v.w;
}

// At most 32 registers a thread (4 slots fit without spilling): two blocks of 1024 threads, a full SM, can be resident.
template <int SLOTS>
__global__ void __launch_bounds__(MAX_THREADS, 2)
softmax_rows(const float* __restrict__ x, float* __restrict__ out, int n_cols, long long x_stride,
             long long out_stride, bool aligned) {
    const float* x_row = x + blockIdx.x * x_stride;
    float* out_row = out + blockIdx.x * out_stride;
    __shared__ float partial_max[MAX_THREADS / 32], partial_sum[MAX_THREADS / 32];

    float4 v[SLOTS];
    float local_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {  // all loads issued before any is used: SLOTS · 16 bytes in flight
        v[k] = load4(x_row, 4 * (threadIdx.x + k * blockDim.x), n_cols, aligned, -INFINITY);
    }
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) local_max = fmaxf(local_max, max4(v[k]));
    const float row_max = block_max(local_max, partial_max);

    float local_sum = 0.f;
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {  // columns past the end hold -inf: exp(-inf) = 0 adds nothing
        v[k] = make_float4(expf(v[k].x - row_max), expf(v[k].y - row_max), expf(v[k].z - row_max), expf(v[k].w - row_max));
        local_sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    const float inverse = 1.f / block_sum(local_sum, partial_sum);
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {
        float4 y = make_float4(v[k].x * inverse, v[k].y * inverse, v[k].z * inverse, v[k].w * inverse);
        store4(out_row, 4 * (threadIdx.x + k * blockDim.x), n_cols, aligned, y);
    }
}

// Rows too long for registers: the online softmax. Each thread keeps a running max m and the sum s of
// exp(x - m) over its columns, rescaling s by exp(m_old - m_new) when the max grows; the block merges the
// threads' (m, s) pairs, then a second pass reads the row again (mostly from L2) to normalise.
__global__ void __launch_bounds__(MAX_THREADS)
softmax_long_rows(const float* __restrict__ x, float* __restrict__ out, int n_cols, long long x_stride,
                  long long out_stride, bool aligned) {
    const float* x_row = x + blockIdx.x * x_stride;
    float* out_row = out + blockIdx.x * out_stride;
    __shared__ float partial_max[MAX_THREADS / 32], partial_sum[MAX_THREADS / 32];

    float m = -INFINITY, s = 0.f;
    for (int col = 4 * threadIdx.x; col < n_cols; col += 4 * blockDim.x) {
        float4 q = load4(x_row, col, n_cols, aligned, -INFINITY);
        float new_max = fmaxf(m, max4(q));
        if (new_max == -INFINITY) continue;  // nothing finite yet: exp(-inf - -inf) would be NaN
        s = s * expf(m - new_max) + ((expf(q.x - new_max) + expf(q.y - new_max)) + (expf(q.z - new_max) + expf(q.w - new_max)));
        m = new_max;
    }
    const float row_max = block_max(m, partial_max);
    const float scaled = m == -INFINITY ? 0.f : s * expf(m - row_max);
    const float inverse = 1.f / block_sum(scaled, partial_sum);
    for (int col = 4 * threadIdx.x; col < n_cols; col += 4 * blockDim.x) {
        float4 q = load4(x_row, col, n_cols, aligned, -INFINITY);
        float4 y = make_float4(expf(q.x - row_max) * inverse, expf(q.y - row_max) * inverse,
                               expf(q.z - row_max) * inverse, expf(q.w - row_max) * inverse);
        store4(out_row, col, n_cols, aligned, y);
    }
}

static bool is_aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

extern "C" void softmax(const float* x, float* out, int M, int N, int x_row_stride, int out_row_stride) {
    if (M <= 0 || N <= 0) return;
    const bool aligned = is_aligned16(x) && is_aligned16(out) && N % 4 == 0 && x_row_stride % 4 == 0 &&
                         out_row_stride % 4 == 0;
    const int slots_needed = (N + 3) / 4;
    if (slots_needed > MAX_THREADS * MAX_SLOTS) {
        softmax_long_rows<<<M, MAX_THREADS>>>(x, out, N, x_row_stride, out_row_stride, aligned);
        return;
    }
    // about four slots (16 floats) a thread: enough bytes in flight, few enough registers for a full SM
    int threads = ((slots_needed + 3) / 4 + 31) / 32 * 32;
    threads = threads < 32 ? 32 : threads > MAX_THREADS ? MAX_THREADS : threads;
    const int slots = (slots_needed + threads - 1) / threads;
    if (slots <= 1) softmax_rows<1><<<M, threads>>>(x, out, N, x_row_stride, out_row_stride, aligned);
    else if (slots <= 2) softmax_rows<2><<<M, threads>>>(x, out, N, x_row_stride, out_row_stride, aligned);
    else softmax_rows<4><<<M, threads>>>(x, out, N, x_row_stride, out_row_stride, aligned);
}
