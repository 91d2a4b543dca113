// Solution — fused layer norm forward in CUDA: one read of x and one write of out per element.
//
// One block per row. Each thread keeps its part of the row in registers as float4 slots (slot k of
// thread t holds columns 4(t + k·blockDim) .. +3, so a warp reads 512 contiguous bytes per slot), loaded
// with 16-byte loads when every row is 16-byte aligned (scalar loads otherwise: a row slice of a wider
// tensor, or N not a multiple of 4). Statistics are two passes over the registers, never E[x²] − E[x]²:
// the mean, then the sums of d = x − mean and of d² in one more block reduction; the sum of d is the
// first mean's own rounding error, taken out again ("corrected two-pass"), which keeps rows with mean
// 1000 accurate. Block reductions: warp shuffles, then one shared-memory slot per warp. The block grows
// with the row so each thread holds about 16 floats; rows longer than a block's registers (over 16,384
// columns) are read three times instead (mean, variance, normalise; the later reads mostly hit L2).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

constexpr float EPS = 1e-5f;  // fixed: the grader passes no eps (as in the Triton version)
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int MAX_THREADS = 1024;
constexpr int MAX_SLOTS = 4;  // float4 slots a thread holds: rows up to 1024 · 4 · 4 = 16,384 floats stay in registers

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

// Every thread gets the block's total. Each call needs its own `partial` arrays: no barrier separates a
// slow warp still reading one call's partials from a fast warp writing the next call's.
__device__ __forceinline__ float block_sum(float v, float* partial) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float total = partial[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) total += partial[w];
    return total;
}

// Two totals for the price of one barrier.
__device__ __forceinline__ float2 block_sum2(float a, float b, float* partial_a, float* partial_b) {
    a = warp_sum(a);
    b = warp_sum(b);
    if (threadIdx.x % 32 == 0) {
        partial_a[threadIdx.x / 32] = a;
        partial_b[threadIdx.x / 32] = b;
    }
    __syncthreads();
    float2 total = make_float2(partial_a[0], partial_b[0]);
    for (int w = 1; w < int(blockDim.x / 32); ++w) {
        total.x += partial_a[w];
        total.y += partial_b[w];
    }
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

__device__ __forceinline__ float sum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// x − mean for the columns inside the row, 0 for those past its end (they must not enter the variance)
__device__ __forceinline__ float4 centre4(float4 v, float mean, int col, int n) {
    return make_float4(col < n ? v.x - mean : 0.f, col + 1 < n ? v.y - mean : 0.f,
                       col + 2 < n ? v.z - mean : 0.f, col + 3 < n ? v.w - mean : 0.f);
}

// (d − shift) · rstd · weight + bias for one slot
__device__ __forceinline__ float4 normalise4(float4 d, float shift, float rstd, float4 w, float4 b) {
    return make_float4((d.x - shift) * rstd * w.x + b.x, (d.y - shift) * rstd * w.y + b.y,
                       (d.z - shift) * rstd * w.z + b.z, (d.w - shift) * rstd * w.w + b.w);
}

template <int SLOTS>
__global__ void __launch_bounds__(MAX_THREADS)
layer_norm_rows(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                float* __restrict__ out, int n_cols, long long x_stride, long long out_stride, bool aligned) {
    const float* x_row = x + blockIdx.x * x_stride;
    float* out_row = out + blockIdx.x * out_stride;
    __shared__ float partial_sum[MAX_THREADS / 32], partial_d[MAX_THREADS / 32], partial_d2[MAX_THREADS / 32];

    float4 v[SLOTS];
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {  // all loads issued before any is used: SLOTS · 16 bytes in flight
        v[k] = load4(x_row, 4 * (threadIdx.x + k * blockDim.x), n_cols, aligned);
    }
    float local = 0.f;
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) local += sum4(v[k]);
    const float mean = block_sum(local, partial_sum) / n_cols;

    float local_d = 0.f, local_d2 = 0.f;
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {
        v[k] = centre4(v[k], mean, 4 * (threadIdx.x + k * blockDim.x), n_cols);
        local_d += sum4(v[k]);
        local_d2 += (v[k].x * v[k].x + v[k].y * v[k].y) + (v[k].z * v[k].z + v[k].w * v[k].w);
    }
    const float2 sums = block_sum2(local_d, local_d2, partial_d, partial_d2);
    const float shift = sums.x / n_cols;  // the mean's rounding error: sum(x - mean) is 0 in exact arithmetic
    const float rstd = rsqrtf(fmaxf(sums.y / n_cols - shift * shift, 0.f) + EPS);
#pragma unroll
    for (int k = 0; k < SLOTS; ++k) {
        const int col = 4 * (threadIdx.x + k * blockDim.x);
        float4 w = load4(weight, col, n_cols, aligned), b = load4(bias, col, n_cols, aligned);
        store4(out_row, col, n_cols, aligned, normalise4(v[k], shift, rstd, w, b));
    }
}

// Rows too long for registers: the same statistics with the row read three times.
__global__ void __launch_bounds__(MAX_THREADS)
layer_norm_long_rows(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                     float* __restrict__ out, int n_cols, long long x_stride, long long out_stride, bool aligned) {
    const float* x_row = x + blockIdx.x * x_stride;
    float* out_row = out + blockIdx.x * out_stride;
    __shared__ float partial_sum[MAX_THREADS / 32], partial_d[MAX_THREADS / 32], partial_d2[MAX_THREADS / 32];

    float local = 0.f;
    for (int col = 4 * threadIdx.x; col < n_cols; col += 4 * blockDim.x) local += sum4(load4(x_row, col, n_cols, aligned));
    const float mean = block_sum(local, partial_sum) / n_cols;
    float local_d = 0.f, local_d2 = 0.f;
    for (int col = 4 * threadIdx.x; col < n_cols; col += 4 * blockDim.x) {
        float4 d = centre4(load4(x_row, col, n_cols, aligned), mean, col, n_cols);
        local_d += sum4(d);
        local_d2 += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
    }
    const float2 sums = block_sum2(local_d, local_d2, partial_d, partial_d2);
    const float shift = sums.x / n_cols;
    const float rstd = rsqrtf(fmaxf(sums.y / n_cols - shift * shift, 0.f) + EPS);
    for (int col = 4 * threadIdx.x; col < n_cols; col += 4 * blockDim.x) {
        float4 d = centre4(load4(x_row, col, n_cols, aligned), mean, col, n_cols);
        float4 w = load4(weight, col, n_cols, aligned), b = load4(bias, col, n_cols, aligned);
        store4(out_row, col, n_cols, aligned, normalise4(d, shift, rstd, w, b));
    }
}

static bool is_aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

extern "C" void layer_norm(const float* x, const float* weight, const float* bias, float* out, int M, int N,
                           int x_row_stride, int out_row_stride) {
    if (M <= 0 || N <= 0) return;
    const bool aligned = is_aligned16(x) && is_aligned16(weight) && is_aligned16(bias) && is_aligned16(out) &&
                         N % 4 == 0 && x_row_stride % 4 == 0 && out_row_stride % 4 == 0;
    const int slots_needed = (N + 3) / 4;
    if (slots_needed > MAX_THREADS * MAX_SLOTS) {
        layer_norm_long_rows<<<M, MAX_THREADS>>>(x, weight, bias, out, N, x_row_stride, out_row_stride, aligned);
        return;
    }
    // about four slots (16 floats) a thread: enough bytes in flight, few enough registers for a full SM
    int threads = ((slots_needed + 3) / 4 + 31) / 32 * 32;
    threads = threads < 32 ? 32 : threads > MAX_THREADS ? MAX_THREADS : threads;
    const int slots = (slots_needed + threads - 1) / threads;
    if (slots <= 1) layer_norm_rows<1><<<M, threads>>>(x, weight, bias, out, N, x_row_stride, out_row_stride, aligned);
    else if (slots <= 2) layer_norm_rows<2><<<M, threads>>>(x, weight, bias, out, N, x_row_stride, out_row_stride, aligned);
    else layer_norm_rows<4><<<M, threads>>>(x, weight, bias, out, N, x_row_stride, out_row_stride, aligned);
}
