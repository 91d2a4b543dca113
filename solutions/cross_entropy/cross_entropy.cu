// Solution — cross-entropy loss and its gradient in CUDA: the logits read once, dlogits written once.
//
// A first tiny kernel counts the rows whose target is not ignore_index (the mean's denominator) into a
// __device__ variable; kernels on one stream run in order, so the row kernel after it reads the count.
//
// One block per row. Pass 1 reads the row from global memory with 16-byte loads (8 bfloat16), keeps a copy
// in shared memory, and folds it into each thread's running max m and sum s of exp(x - m), rescaling s by
// exp(m_old - m_new) when the max grows (the online softmax: one pass). The block merges the threads' (m, s)
// pairs; lse = max + log(sum). Pass 2 takes the row from shared memory and writes the gradient
// (exp(x - max) / sum - [j == target]) / n_valid as bfloat16 with 16-byte stores; thread 0 writes the loss
// lse - x[target]. exp is exp2 of x·log2(e) - max·log2(e): one FMA and one MUFU.EX2. An ignored row reads
// nothing: its loss and gradient are zeros.
//
// A row need not start on 16 bytes (a row slice, or V not a multiple of 8): its first few columns (up to 7)
// before a 16-byte boundary and its last few after the last one are handled one at a time, and the copy in
// shared memory keeps the row's offset within 16 bytes, so the vector loads land on aligned shared slots too.
// dlogits may have another offset: its vectors are then gathered from shared memory value by value.
// Rows longer than shared memory holds (over about 115,000 columns on an H100) read the row twice (the second
// time mostly from L2).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

constexpr long long IGNORE_INDEX = -100;  // PyTorch's ignore_index
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int MAX_THREADS = 1024;
constexpr int PER_SLOT = 8;    // bfloat16 values in 16 bytes
#ifndef BATCH                  // 16-byte loads a thread issues before using any (32 bytes in flight at 2)
#define BATCH 2
#endif
#ifndef SLOTS_PER_THREAD       // 16-byte slots of a row per thread, which sizes the block: 4 gives 1024 threads
#define SLOTS_PER_THREAD 8     // and two rows an SM at V = 32,768; 8 gives 512 and three (shared memory bound).
#endif                         // `kcourse tune` on an H200: 8 and BATCH 2 reach 87% of copy, 4 and 4 81%
constexpr float LOG2E = 1.4426950408889634f;
constexpr unsigned short BF16_NEG_INF = 0xFF80;

__device__ int valid_rows;  // rows whose target is not IGNORE_INDEX: written by count_valid_rows, read after it

// --- reductions ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    return v;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

// Every thread gets the block's result. Each call needs its own `partial` array: no barrier separates a slow
// warp still reading one call's partials from a fast warp writing the next call's.
__device__ __forceinline__ float block_max(float v, float* partial) {
    v = warp_max(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float total = partial[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) total = fmaxf(total, partial[w]);
    return total;
}

template <typename T>
__device__ __forceinline__ T block_sum(T v, T* partial) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    T total = partial[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) total += partial[w];
    return total;
}

__global__ void __launch_bounds__(MAX_THREADS) count_valid_rows(const int64_t* __restrict__ targets, int M) {
    __shared__ int partial[MAX_THREADS / 32];
    int count = 0;
#pragma unroll 8  // 8 independent loads in flight: M = 8192 is one round trip to memory, not eight
    for (int i = threadIdx.x; i < M; i += blockDim.x) count += targets[i] != IGNORE_INDEX;
    count = block_sum(count, partial);
    if (threadIdx.x == 0) valid_rows = count;
}

// --- bfloat16 bits: 8 of them in a uint4, element 2k the low half of word k, 2k+1 the high half ---------------

__device__ __forceinline__ float bf16_bits_to_float(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ float lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi(unsigned w) { return __uint_as_float(w & 0xFFFF0000u); }

__device__ __forceinline__ unsigned pack(float a, float b) {  // a -> low half, b -> high half, rounded to nearest
    __nv_bfloat162 two = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<unsigned*>(&two);
}

__device__ __forceinline__ unsigned short to_bf16_bits(float a) {
    __nv_bfloat16 one = __float2bfloat16_rn(a);
    return *reinterpret_cast<unsigned short*>(&one);
}

__device__ __forceinline__ __nv_bfloat162 as_pair(unsigned w) { return *reinterpret_cast<__nv_bfloat162*>(&w); }

// The max of bfloat16 values is one of them: taken on packed pairs (__hmax2), exactly, without unpacking.
__device__ __forceinline__ float max8(uint4 q) {
    const __nv_bfloat162 m = __hmax2(__hmax2(as_pair(q.x), as_pair(q.y)), __hmax2(as_pair(q.z), as_pair(q.w)));
    return fmaxf(__low2float(m), __high2float(m));
}

// 2^x without exp2f's care for results below 2^-126 (p < 1e-38 is 0 to any tolerance): one MUFU.EX2
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// exp(x - max) for x a bfloat16 value, max_log2 = max·log2(e)
__device__ __forceinline__ float exp_shifted(float x, float max_log2) { return fast_exp2(fmaf(x, LOG2E, -max_log2)); }

__device__ __forceinline__ float sum_exp8(uint4 q, float max_log2) {
    return ((exp_shifted(lo(q.x), max_log2) + exp_shifted(hi(q.x), max_log2)) +
            (exp_shifted(lo(q.y), max_log2) + exp_shifted(hi(q.y), max_log2))) +
           ((exp_shifted(lo(q.z), max_log2) + exp_shifted(hi(q.z), max_log2)) +
            (exp_shifted(lo(q.w), max_log2) + exp_shifted(hi(q.w), max_log2)));
}

// A thread's running max m and sum s of exp(x - m) (the online softmax): a new batch of values raises the max
// to new_max, and the sum so far is rescaled by exp(m - new_max) once per batch, not once per value.
struct Running {
    float m = -INFINITY, s = 0.f;

    template <int N>
    __device__ __forceinline__ void add(const uint4 (&q)[N]) {  // N slots of 8 values (-inf past the row: adds 0)
        float batch_max = -INFINITY;
#pragma unroll
        for (int k = 0; k < N; ++k) batch_max = fmaxf(batch_max, max8(q[k]));
        const float new_max = fmaxf(m, batch_max);  // finite: the first slot holds a column of the row
        float batch_sum = 0.f;
#pragma unroll
        for (int k = 0; k < N; ++k) batch_sum += sum_exp8(q[k], new_max * LOG2E);
        s = s * fast_exp2((m - new_max) * LOG2E) + batch_sum;  // m = -inf the first time: s is 0, 0 * 0
        m = new_max;
    }

    __device__ __forceinline__ void add_one(float x) {
        const float new_max = fmaxf(m, x);
        s = s * fast_exp2((m - new_max) * LOG2E) + fast_exp2((x - new_max) * LOG2E);
        m = new_max;
    }
};

// The slot's gradient, packed: exp(x - max) · inv for each value, minus `scale` at column `target`
// (`col` is the slot's first column). inv = scale / sum, scale = 1 / n_valid.
__device__ __forceinline__ uint4 gradient8(uint4 q, int col, float max_log2, float inv, int target, float scale) {
    float g[PER_SLOT] = {lo(q.x), hi(q.x), lo(q.y), hi(q.y), lo(q.z), hi(q.z), lo(q.w), hi(q.w)};
#pragma unroll
    for (int k = 0; k < PER_SLOT; ++k) g[k] = exp_shifted(g[k], max_log2) * inv;
    if ((unsigned)(target - col) < PER_SLOT) {  // one slot of the row holds the target
#pragma unroll
        for (int k = 0; k < PER_SLOT; ++k) g[k] -= col + k == target ? scale : 0.f;
    }
    return make_uint4(pack(g[0], g[1]), pack(g[2], g[3]), pack(g[4], g[5]), pack(g[6], g[7]));
}

// --- a row's columns in 16-byte pieces -------------------------------------------------------------------

// Where the 16-byte boundaries fall in a row starting at `row`: columns [0, head) come before the first,
// `slots` whole 16-byte slots follow, then the tail up to n. `phase` is the row's offset in a 16-byte block,
// in values (0 .. 7).
struct Pieces {
    int phase, head, slots;

    __device__ __forceinline__ Pieces(const void* row, int n) {
        phase = (int)((reinterpret_cast<std::uintptr_t>(row) / 2) % PER_SLOT);
        head = min((PER_SLOT - phase) % PER_SLOT, n);
        slots = (n - head) / PER_SLOT;
    }
    __device__ __forceinline__ int edge_count(int n) const { return n - PER_SLOT * slots; }  // head + tail
    // the i-th column outside the slots (i < edge_count): the head's, then the tail's
    __device__ __forceinline__ int edge_column(int i) const { return i < head ? i : i + PER_SLOT * slots; }
};

// An ignored row: loss 0 and a zero gradient, without reading its logits.
__device__ __forceinline__ void zero_row(__nv_bfloat16* d_row, float* loss, int n_cols) {
    const Pieces d(d_row, n_cols);
    uint4* d_slots = reinterpret_cast<uint4*>(d_row + d.head);
    for (int j = threadIdx.x; j < d.slots; j += blockDim.x) d_slots[j] = make_uint4(0u, 0u, 0u, 0u);
    if (threadIdx.x < d.edge_count(n_cols)) d_row[d.edge_column(threadIdx.x)] = __float2bfloat16_rn(0.f);
    if (threadIdx.x == 0) *loss = 0.f;
}

// Rows that fit in shared memory. At most 32 registers a thread: two blocks of 1024 threads, a full SM (shared
// memory permitting: two rows of up to 56K columns).
__global__ void __launch_bounds__(MAX_THREADS, 2)
cross_entropy_rows(const __nv_bfloat16* __restrict__ logits, const int64_t* __restrict__ targets,
                   float* __restrict__ losses, __nv_bfloat16* __restrict__ dlogits, int n_cols,
                   long long x_stride, long long d_stride) {
    extern __shared__ uint4 cache_slots[];  // the row at its own offset within 16 bytes: column c at c + x.phase
    unsigned short* cache = reinterpret_cast<unsigned short*>(cache_slots);
    __shared__ float partial_max[MAX_THREADS / 32], partial_sum[MAX_THREADS / 32];
    const __nv_bfloat16* x_row = logits + blockIdx.x * x_stride;
    __nv_bfloat16* d_row = dlogits + blockIdx.x * d_stride;
    const long long label = targets[blockIdx.x];
    if (label == IGNORE_INDEX) {
        zero_row(d_row, losses + blockIdx.x, n_cols);
        return;
    }
    const int target = (int)label;  // a class, 0 .. V - 1

    // pass 1: global -> shared, and the running (max, sum) of each thread
    const Pieces x(x_row, n_cols);
    const uint4* x_slots = reinterpret_cast<const uint4*>(x_row + x.head);
    uint4* cached_slots = cache_slots + (x.head + x.phase) / PER_SLOT;  // 16-byte aligned in shared memory too
    Running run;
    const unsigned neg_inf = BF16_NEG_INF | ((unsigned)BF16_NEG_INF << 16);
    for (int j0 = threadIdx.x; j0 < x.slots; j0 += BATCH * blockDim.x) {
        uint4 q[BATCH];
#pragma unroll
        for (int k = 0; k < BATCH; ++k) {  // all of a batch's loads issued before any is used
            const int j = j0 + k * blockDim.x;
            q[k] = j < x.slots ? __ldg(x_slots + j) : make_uint4(neg_inf, neg_inf, neg_inf, neg_inf);
        }
#pragma unroll
        for (int k = 0; k < BATCH; ++k) {
            if (j0 + k * blockDim.x < x.slots) cached_slots[j0 + k * blockDim.x] = q[k];
        }
        run.add(q);
    }
    if (threadIdx.x < x.edge_count(n_cols)) {
        const int col = x.edge_column(threadIdx.x);
        const unsigned short bits = reinterpret_cast<const unsigned short*>(x_row)[col];
        cache[col + x.phase] = bits;
        run.add_one(bf16_bits_to_float(bits));
    }
    const float row_max = block_max(run.m, partial_max);
    const float sum = block_sum(run.m == -INFINITY ? 0.f : run.s * fast_exp2((run.m - row_max) * LOG2E), partial_sum);
    // block_sum's barrier also orders every thread's shared stores before the reads below

    // pass 2: shared -> the gradient, at dlogits' own 16-byte boundaries
    const float scale = __fdividef(1.f, (float)valid_rows);  // the mean's 1 / n_valid
    const float inv = __fdividef(scale, sum);                // sum >= 1: the max column adds exp(0)
    const float max_log2 = row_max * LOG2E;
    const Pieces d(d_row, n_cols);
    uint4* d_slots = reinterpret_cast<uint4*>(d_row + d.head);
    const bool same_phase = d.phase == x.phase;
    for (int j = threadIdx.x; j < d.slots; j += blockDim.x) {
        const int col = d.head + PER_SLOT * j;
        uint4 q;
        if (same_phase) {
            q = cache_slots[(col + x.phase) / PER_SLOT];
        } else {  // dlogits' boundaries fall elsewhere in the row: gather the 8 values
            const unsigned short* c = cache + col + x.phase;
            q = make_uint4(c[0] | ((unsigned)c[1] << 16), c[2] | ((unsigned)c[3] << 16), c[4] | ((unsigned)c[5] << 16),
                           c[6] | ((unsigned)c[7] << 16));
        }
        d_slots[j] = gradient8(q, col, max_log2, inv, target, scale);
    }
    if (threadIdx.x < d.edge_count(n_cols)) {
        const int col = d.edge_column(threadIdx.x);
        const float g = exp_shifted(bf16_bits_to_float(cache[col + x.phase]), max_log2) * inv;
        d_row[col] = __float2bfloat16_rn(col == target ? g - scale : g);
    }
    if (threadIdx.x == 0) losses[blockIdx.x] = row_max + logf(sum) - bf16_bits_to_float(cache[target + x.phase]);
}

// Rows longer than shared memory holds: the same online pass 1 without the copy, and a pass 2 that reads the row
// again (mostly from L2). One value at a time where a row and its gradient are not both 16-byte aligned.
__global__ void __launch_bounds__(MAX_THREADS)
cross_entropy_long_rows(const __nv_bfloat16* __restrict__ logits, const int64_t* __restrict__ targets,
                        float* __restrict__ losses, __nv_bfloat16* __restrict__ dlogits, int n_cols,
                        long long x_stride, long long d_stride) {
    __shared__ float partial_max[MAX_THREADS / 32], partial_sum[MAX_THREADS / 32];
    const __nv_bfloat16* x_row = logits + blockIdx.x * x_stride;
    __nv_bfloat16* d_row = dlogits + blockIdx.x * d_stride;
    const long long label = targets[blockIdx.x];
    if (label == IGNORE_INDEX) {
        zero_row(d_row, losses + blockIdx.x, n_cols);
        return;
    }
    const int target = (int)label;
    const Pieces x(x_row, n_cols);
    const uint4* x_slots = reinterpret_cast<const uint4*>(x_row + x.head);
    const unsigned short* x_bits = reinterpret_cast<const unsigned short*>(x_row);
    Running run;
    for (int j = threadIdx.x; j < x.slots; j += blockDim.x) {
        const uint4 q[1] = {__ldg(x_slots + j)};
        run.add(q);
    }
    if (threadIdx.x < x.edge_count(n_cols)) run.add_one(bf16_bits_to_float(x_bits[x.edge_column(threadIdx.x)]));
    const float row_max = block_max(run.m, partial_max);
    const float sum = block_sum(run.m == -INFINITY ? 0.f : run.s * fast_exp2((run.m - row_max) * LOG2E), partial_sum);

    const float scale = __fdividef(1.f, (float)valid_rows);
    const float inv = __fdividef(scale, sum);
    const float max_log2 = row_max * LOG2E;
    const Pieces d(d_row, n_cols);
    if (d.phase == x.phase) {  // the same boundaries: 16-byte loads and stores
        uint4* d_slots = reinterpret_cast<uint4*>(d_row + d.head);
        for (int j = threadIdx.x; j < x.slots; j += blockDim.x) {
            d_slots[j] = gradient8(__ldg(x_slots + j), x.head + PER_SLOT * j, max_log2, inv, target, scale);
        }
        if (threadIdx.x < x.edge_count(n_cols)) {
            const int col = x.edge_column(threadIdx.x);
            const float g = exp_shifted(bf16_bits_to_float(x_bits[col]), max_log2) * inv;
            d_row[col] = __float2bfloat16_rn(col == target ? g - scale : g);
        }
    } else {
        for (int col = threadIdx.x; col < n_cols; col += blockDim.x) {
            const float g = exp_shifted(bf16_bits_to_float(x_bits[col]), max_log2) * inv;
            d_row[col] = __float2bfloat16_rn(col == target ? g - scale : g);
        }
    }
    if (threadIdx.x == 0) losses[blockIdx.x] = row_max + logf(sum) - bf16_bits_to_float(x_bits[target]);
}

// --- the entry point ------------------------------------------------------------------------------------

// Shared memory for a row of n columns at any offset within 16 bytes, in bytes.
static size_t row_cache_bytes(int n) { return (size_t)(n + 2 * PER_SLOT) * 2; }

// The most dynamic shared memory cross_entropy_rows may ask for on this GPU, opted in once: the block's limit
// (227 KB on an H100) less room for its static arrays.
static size_t shared_memory_limit() {
    static int limit = -1;
    if (limit < 0) {
        int device = 0, optin = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        limit = optin > 1024 ? optin - 1024 : 0;
        cudaFuncSetAttribute(cross_entropy_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
    }
    return (size_t)limit;
}

// Threads for a row of n columns: about SLOTS_PER_THREAD 16-byte slots a thread, a multiple of 32, at most 1024.
static int threads_for(int n) {
    const int slots = (n + PER_SLOT - 1) / PER_SLOT;
    const int threads = ((slots + SLOTS_PER_THREAD - 1) / SLOTS_PER_THREAD + 31) / 32 * 32;
    return threads < 32 ? 32 : threads > MAX_THREADS ? MAX_THREADS : threads;
}

extern "C" void cross_entropy(const __nv_bfloat16* logits, const int64_t* targets, float* losses,
                              __nv_bfloat16* dlogits, int M, int V, int logits_row_stride, int dlogits_row_stride) {
    if (M <= 0 || V <= 0) return;
    count_valid_rows<<<1, MAX_THREADS>>>(targets, M);
    const size_t cache = row_cache_bytes(V);
    if (cache <= shared_memory_limit()) {
        cross_entropy_rows<<<M, threads_for(V), cache>>>(logits, targets, losses, dlogits, V, logits_row_stride,
                                                         dlogits_row_stride);
    } else {
        cross_entropy_long_rows<<<M, MAX_THREADS>>>(logits, targets, losses, dlogits, V, logits_row_stride,
                                                    dlogits_row_stride);
    }
}
