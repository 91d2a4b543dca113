// Solution — RMS norm forward in CUDA (V3 of the ladder): one read of x and one write of out per element.
//
// One block per row. Each thread keeps its part of the row in registers as float4 slots (slot k of
// thread t holds columns 4(t + k·blockDim) .. +3, so a warp reads 512 contiguous bytes per slot), loaded
// with 16-byte loads when every row is 16-byte aligned (scalar loads otherwise: a row slice of a wider
// tensor, or N not a multiple of 4). The sum of squares is one block reduction (warp shuffles, then one
// shared-memory slot per warp); the scaling uses the registers, so x is read once. The block grows with
// the row so each thread holds about 16 floats; rows longer than a block's registers (over 16,384
// columns) are read twice instead.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

constexpr float EPS = 1e-6f;  // fixed, as in LLaMA-style models: the grader passes no eps
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int MAX_THREADS = 1024;
constexpr int MAX_SLOTS = 4;  // float4 slots a thread holds: rows up to 1024 · 4 · 4 = 16,384 floats stay in registers

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;  // xor shuffles leave the total in every lane
}

// Every thread gets the block's total: warps reduce with shuffles, then each thread adds the warps' sums.
__device__ __forceinline__ float block_sum(float v, float* partial) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float total = partial[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) total += partial[w];
    return total;
}

// Columns col .. col+3 of a row, 0 past its end. `aligned`: every row starts on 16 bytes and N % 4 == 0,
// so a slot is wholly inside the row or wholly outside it.
__device__ __forceinline__ float4 load4(const float* row, int col, int n, bool aligned) {
    if (aligned) return col < n ? __ldg(reinterpret_cast<const float4*>(row + col)) : make_float4(0.f, 0.f, 0.f, 0.f);
    return make_float4(col < n ? __ldg(row + col) : 0.f, col + 1 < n ? __ldg(row + col + 1) : 0.f,
                       col + 2 < n ? __ldg(row + col + 2) : 0.f, col + 3 < n ? __ldg(row + col + 3) : 0.f);
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

__device__ __forceinline__ float squares4(float4 v) { return (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w); }

__device__ __forceinline__ float4 scale4(float4 v, float r, float4 w) {
    return make_float4(v.x * r * w.x, v.y * r * w.y, v.z * r * w.z, v.w * r * w.w);
}

template <int SLOTS>
__global__ void __launch_bounds__(MAX_THREADS)
rms_norm_rows(const float* __restrict__ x, const float* __restrict__ weight, float* __restrict__ out, int n_cols,
              long long x_stride, long long out_stride, bool aligned) {
    const float* x_row = x + blockIdx.x * x_stride;
    float* out_row = out + blockIdx.x * out_stride;
    __shared__ float partial[MAX_THREADS / 32];

    float4 v[SLOTS];
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {  // all loads issued before any is used: SLOTS · 16 bytes in flight
        v[k] = load4(x_row, 4 * (threadIdx.x + k * blockDim.x), n_cols, aligned);
    }
    float local = 0.f;
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) local += squares4(v[k]);  // columns past the end hold 0
    // x ~ 1e4 gives squares ~ 1e8 and row sums ~ 1e12: far inside float32's range (3e38), and the relative
    // rounding error of a sum does not depend on the values' size
    const float rstd = rsqrtf(block_sum(local, partial) / n_cols + EPS);
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {
        const int col = 4 * (threadIdx.x + k * blockDim.x);
        store4(out_row, col, n_cols, aligned, scale4(v[k], rstd, load4(weight, col, n_cols, aligned)));
    }
}

// Rows too long for registers: the row is read twice (the second time mostly from L2).
__global__ void __launch_bounds__(MAX_THREADS)
rms_norm_long_rows(const float* __restrict__ x, const float* __restrict__ weight, float* __restrict__ out, int n_cols,
                   long long x_stride, long long out_stride, bool aligned) {
    const float* x_row = x + blockIdx.x * x_stride;
    float* out_row = out + blockIdx.x * out_stride;
    __shared__ float partial[MAX_THREADS / 32];

    float local = 0.f;
    for (int col = 4 * threadIdx.x; col < n_cols; col += 4 * blockDim.x) local += squares4(load4(x_row, col, n_cols, aligned));
    const float rstd = rsqrtf(block_sum(local, partial) / n_cols + EPS);
    for (int col = 4 * threadIdx.x; col < n_cols; col += 4 * blockDim.x) {
        store4(out_row, col, n_cols, aligned,
               scale4(load4(x_row, col, n_cols, aligned), rstd, load4(weight, col, n_cols, aligned)));
    }
}

static bool is_aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

extern "C" void rms_norm(const float* x, const float* weight, float* out, int M, int N, int x_row_stride,
                         int out_row_stride) {
    if (M <= 0 || N <= 0) return;
    const bool aligned = is_aligned16(x) && is_aligned16(weight) && is_aligned16(out) && N % 4 == 0 &&
                         x_row_stride % 4 == 0 && out_row_stride % 4 == 0;
    const int slots_needed = (N + 3) / 4;
    if (slots_needed > MAX_THREADS * MAX_SLOTS) {
        rms_norm_long_rows<<<M, MAX_THREADS>>>(x, weight, out, N, x_row_stride, out_row_stride, aligned);
        return;
    }
    // about four slots (16 floats) a thread: enough bytes in flight, few enough registers for a full SM
    int threads = ((slots_needed + 3) / 4 + 31) / 32 * 32;
    threads = threads < 32 ? 32 : threads > MAX_THREADS ? MAX_THREADS : threads;
    const int slots = (slots_needed + threads - 1) / threads;
    if (slots <= 1) rms_norm_rows<1><<<M, threads>>>(x, weight, out, N, x_row_stride, out_row_stride, aligned);
    else if (slots <= 2) rms_norm_rows<2><<<M, threads>>>(x, weight, out, N, x_row_stride, out_row_stride, aligned);
    else rms_norm_rows<4><<<M, threads>>>(x, weight, out, N, x_row_stride, out_row_stride, aligned);
}
