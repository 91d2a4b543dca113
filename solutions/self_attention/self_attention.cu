// Solution — single-head self-attention in float32 on the CUDA cores: out = softmax(q k^T / sqrt(d)) v.
//
// One kernel, no N x N buffer (ladder step 4 of the README):
// 1. A block owns 128 query rows of one batch entry. It loads them once into shared memory, transposed and
//    already multiplied by log2(e) / sqrt(d), so a score is one dot product and its exponential one exp2f.
// 2. Keys and values stream through in tiles of 64 rows, copied with cp.async (16 bytes at a time, rows past
//    N zero-filled). The next K tile is in flight while the block works on P V; the V tile while it works on
//    Q K^T. Three __syncthreads per tile.
// 3. Both products are register-tiled like an SGEMM: a thread holds an 8 x 8 (d = 128: 8 x 4) block of scores
//    and an 8 x (d / CG) block of the output, so every float read from shared memory feeds 4 to 8 FMAs. Its
//    8 rows are two groups of 4, 64 rows apart, and its keys are 8 (or 16) apart: a quarter-warp's 16-byte
//    reads then hit distinct banks (K's rows are padded by 4 floats for that).
// 4. The online softmax: per row a running max m (shared by the CG threads of the row, through shuffles) and
//    per thread a running sum l of its own columns; a new max rescales l and the output by exp2(m_old - m_new).
//    The thread sums are added once, at the end. P goes through shared memory (key-major) to the P V product.
// 5. Causal: a block stops at the tile holding its last row's diagonal and masks only the tiles that cross it
//    (or hang over N); the heaviest query tiles are launched first.
// d = 32, 64 and 128 take this path; any other d (up to 256), a pointer off a 16-byte boundary, or a GPU
// with too little shared memory per block takes a plain one-warp-per-row online-softmax kernel.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int TM = 8;   // query rows per thread
constexpr int BN = 64;  // keys per tile

// Threads per block = RG row groups x CG column groups. A row's CG threads share a warp (its max is a shuffle).
template <int D> struct Shape;
template <> struct Shape<32> { static constexpr int RG = 16, CG = 8, MIN_BLOCKS = 2; };
template <> struct Shape<64> { static constexpr int RG = 16, CG = 8, MIN_BLOCKS = 2; };
template <> struct Shape<128> { static constexpr int RG = 16, CG = 16, MIN_BLOCKS = 1; };

template <int D>
struct Layout {
    static constexpr int RG = Shape<D>::RG, CG = Shape<D>::CG, THREADS = RG * CG;
    static constexpr int BM = TM * RG;  // 128 query rows per block
    static constexpr int TN = BN / CG;  // keys per thread: cg, cg + CG, ...
    static constexpr int TD = D / CG;   // output columns per thread: float4s at cg * 4, cg * 4 + 4 * CG, ...
    static constexpr int KS = D + 4;    // K row stride: 8 consecutive rows start in 8 different bank quads
    static constexpr int PS = BM + 4;   // P (key-major) row stride, likewise
    static constexpr int Q_FLOATS = D * BM, K_FLOATS = BN * KS, V_FLOATS = BN * D, P_FLOATS = BN * PS;
    static constexpr size_t SMEM_BYTES = sizeof(float) * (Q_FLOATS + K_FLOATS + V_FLOATS + P_FLOATS);
    static_assert(TN * CG == BN && TD * CG == D && TD % 4 == 0, "tile shape");
};

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled and nothing is read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory"); }

// BN rows of a (rows, D) matrix starting at `src` into shared memory rows `stride` floats apart; rows at or
// past `rows_left` become zeros (a value row of zeros times a weight of zero stays zero, never NaN).
template <int D, int STRIDE, int THREADS>
__device__ __forceinline__ void load_tile_async(float* dst, const float* src, int rows_left) {
    constexpr int CHUNKS = BN * D / 4;
    static_assert(CHUNKS % THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int i = 0; i < CHUNKS / THREADS; ++i) {
        const int c = threadIdx.x + i * THREADS, row = c / (D / 4), col = (c % (D / 4)) * 4;
        const bool valid = row < rows_left;
        cp_async16(dst + row * STRIDE + col, src + (size_t)(valid ? row : 0) * D + col, valid);
    }
}

// Query rows q0 .. q0 + BM - 1, scaled, transposed into Qs[dim * BM + row]; rows past N are zeros.
template <int D>
__device__ __forceinline__ void load_queries(float* Qs, const float* qb, int q0, int N, float qscale) {
    using L = Layout<D>;
#pragma unroll 4
    for (int c = threadIdx.x; c < L::BM * D / 4; c += L::THREADS) {
        const int r = c % L::BM, d4 = (c / L::BM) * 4;  // consecutive threads: consecutive rows (no bank conflict)
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0 + r < N) x = *reinterpret_cast<const float4*>(qb + (size_t)(q0 + r) * D + d4);
        Qs[(d4 + 0) * L::BM + r] = x.x * qscale;
        Qs[(d4 + 1) * L::BM + r] = x.y * qscale;
        Qs[(d4 + 2) * L::BM + r] = x.z * qscale;
        Qs[(d4 + 3) * L::BM + r] = x.w * qscale;
    }
}

// Row i (0..7) of a thread in row group rg: two groups of 4 rows, BM / 2 apart.
template <int D>
__device__ __forceinline__ int row_of(int rg, int i) { return (i / 4) * (Layout<D>::BM / 2) + rg * 4 + i % 4; }

// s[i][j] += Q[row i] . K[key j] over all D dimensions (Qs transposed, Ks row-major).
template <int D>
__device__ __forceinline__ void scores(float (&s)[TM][Layout<D>::TN], const float* Qs, const float* Ks, int rg, int cg) {
    using L = Layout<D>;
#pragma unroll 2
    for (int d4 = 0; d4 < D; d4 += 4) {
        float kf[L::TN][4];
#pragma unroll
        for (int j = 0; j < L::TN; ++j)
            *reinterpret_cast<float4*>(kf[j]) = *reinterpret_cast<const float4*>(Ks + (cg + L::CG * j) * L::KS + d4);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float qf[TM];
            const float* column = Qs + (d4 + e) * L::BM + rg * 4;
            *reinterpret_cast<float4*>(qf) = *reinterpret_cast<const float4*>(column);
            *reinterpret_cast<float4*>(qf + 4) = *reinterpret_cast<const float4*>(column + L::BM / 2);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < L::TN; ++j) s[i][j] = fmaf(qf[i], kf[j][e], s[i][j]);
        }
    }
}

// o[i][c] += sum over the tile's keys of P[key][row i] * V[key][column c] (Ps key-major, Vs row-major).
template <int D>
__device__ __forceinline__ void weighted_values(float (&o)[TM][Layout<D>::TD], const float* Ps, const float* Vs, int rg, int cg) {
    using L = Layout<D>;
#pragma unroll 4
    for (int kk = 0; kk < BN; ++kk) {
        float pf[TM], vf[L::TD];
        *reinterpret_cast<float4*>(pf) = *reinterpret_cast<const float4*>(Ps + kk * L::PS + rg * 4);
        *reinterpret_cast<float4*>(pf + 4) = *reinterpret_cast<const float4*>(Ps + kk * L::PS + L::BM / 2 + rg * 4);
#pragma unroll
        for (int h = 0; h < L::TD / 4; ++h)
            *reinterpret_cast<float4*>(vf + 4 * h) = *reinterpret_cast<const float4*>(Vs + kk * D + h * 4 * L::CG + cg * 4);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int c = 0; c < L::TD; ++c) o[i][c] = fmaf(pf[i], vf[c], o[i][c]);
    }
}

template <int D, bool CAUSAL>
__global__ void __launch_bounds__(Layout<D>::THREADS, Shape<D>::MIN_BLOCKS)
attention_tiled(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                float* __restrict__ out, int N, float qscale) {
    using L = Layout<D>;
    extern __shared__ __align__(16) float smem[];
    float* Qs = smem;
    float* Ks = Qs + L::Q_FLOATS;
    float* Vs = Ks + L::K_FLOATS;
    float* Ps = Vs + L::V_FLOATS;

    const int tid = threadIdx.x, cg = tid % L::CG, rg = tid / L::CG;
    const int q0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * L::BM;  // causal: longest rows first
    const size_t batch = (size_t)blockIdx.y * N * D;
    const float *qb = q + batch, *kb = k + batch, *vb = v + batch;
    const int visible = CAUSAL ? min(N, q0 + L::BM) : N;  // keys any row of this block sees
    const int tiles = (visible + BN - 1) / BN;

    load_tile_async<D, L::KS, L::THREADS>(Ks, kb, N);
    cp_async_commit();
    load_queries<D>(Qs, qb, q0, N, qscale);

    float o[TM][L::TD], m[TM], l[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int c = 0; c < L::TD; ++c) o[i][c] = 0.f;
    }

    for (int t = 0; t < tiles; ++t) {
        const int k0 = t * BN;
        cp_async_wait<0>();
        __syncthreads();  // K tile t (and the queries) in shared memory; every thread is done with V and P of t-1
        load_tile_async<D, D, L::THREADS>(Vs, vb + (size_t)k0 * D, N - k0);
        cp_async_commit();

        float s[TM][L::TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < L::TN; ++j) s[i][j] = 0.f;
        scores<D>(s, Qs, Ks, rg, cg);
        __syncthreads();  // every thread is done with K tile t: the next one may land
        if (t + 1 < tiles) load_tile_async<D, L::KS, L::THREADS>(Ks, kb + (size_t)(k0 + BN) * D, N - k0 - BN);
        cp_async_commit();  // an empty group on the last tile keeps the wait counts below the same

        if (k0 + BN > N || (CAUSAL && k0 + BN - 1 > q0)) {  // the tile hangs over N or crosses the diagonal
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < L::TN; ++j) {
                    const int key = k0 + cg + L::CG * j;
                    if (key >= N || (CAUSAL && key > q0 + row_of<D>(rg, i))) s[i][j] = -INFINITY;
                }
        }

#pragma unroll
        for (int i = 0; i < TM; ++i) {
            float tile_max = s[i][0];
#pragma unroll
            for (int j = 1; j < L::TN; ++j) tile_max = fmaxf(tile_max, s[i][j]);
#pragma unroll
            for (int offset = L::CG / 2; offset > 0; offset /= 2)
                tile_max = fmaxf(tile_max, __shfl_xor_sync(FULL_MASK, tile_max, offset));
            const float m_new = fmaxf(m[i], tile_max);
            const float base = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no key yet: no -inf - -inf
            const float alpha = exp2f(m[i] - base);
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < L::TN; ++j) {
                s[i][j] = exp2f(s[i][j] - base);
                sum += s[i][j];
            }
            l[i] = l[i] * alpha + sum;
            m[i] = m_new;
#pragma unroll
            for (int c = 0; c < L::TD; ++c) o[i][c] *= alpha;
        }
#pragma unroll
        for (int j = 0; j < L::TN; ++j) {
            float* column = Ps + (cg + L::CG * j) * L::PS + rg * 4;
            *reinterpret_cast<float4*>(column) = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
            *reinterpret_cast<float4*>(column + L::BM / 2) = make_float4(s[4][j], s[5][j], s[6][j], s[7][j]);
        }
        cp_async_wait<1>();
        __syncthreads();  // P and V tile t in shared memory
        weighted_values<D>(o, Ps, Vs, rg, cg);
    }

    float* ob = out + batch;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        float sum = l[i];
#pragma unroll
        for (int offset = L::CG / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(FULL_MASK, sum, offset);
        const int row = q0 + row_of<D>(rg, i);
        if (row >= N) continue;
        const float inv = 1.f / sum;
#pragma unroll
        for (int h = 0; h < L::TD / 4; ++h)
            *reinterpret_cast<float4*>(ob + (size_t)row * D + h * 4 * L::CG + cg * 4) =
                make_float4(o[i][4 * h] * inv, o[i][4 * h + 1] * inv, o[i][4 * h + 2] * inv, o[i][4 * h + 3] * inv);
    }
}

// Launches the tiled kernel; false where this GPU cannot give a block its shared memory (d = 128 needs 162 KB:
// an H100 or an A100, not a GPU with 100 KB per block), and the caller falls back to the plain kernel.
template <int D, bool CAUSAL>
bool launch_tiled(const float* q, const float* k, const float* v, float* out, int B, int N) {
    using L = Layout<D>;
    static int opted_in = 0;  // over 48 KB of shared memory needs an opt-in, once per kernel: 1 granted, -1 refused
    if (opted_in == 0) {
        const cudaError_t status = cudaFuncSetAttribute(attention_tiled<D, CAUSAL>,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::SMEM_BYTES);
        opted_in = status == cudaSuccess ? 1 : -1;
        if (status != cudaSuccess) cudaGetLastError();  // clear it: the fallback runs instead
    }
    if (opted_in < 0) return false;
    const dim3 grid((N + L::BM - 1) / L::BM, B);
    attention_tiled<D, CAUSAL><<<grid, L::THREADS, L::SMEM_BYTES>>>(q, k, v, out, N, LOG2E / sqrtf((float)D));
    return true;
}

// Any d up to 256, any alignment: one warp per query row, lane c holds dimensions c, c + 32, ...; the online
// softmax one key at a time (the README's step 2, with the dot product split over the warp).
constexpr int ANY_D_MAX = 256, ANY_D_PER_LANE = ANY_D_MAX / 32, ANY_D_WARPS = 8;

__global__ void __launch_bounds__(32 * ANY_D_WARPS)
attention_any_d(const float* q, const float* k, const float* v, float* out, int B, int N, int d, int causal, float qscale) {
    const long long row_id = (long long)blockIdx.x * ANY_D_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row_id >= (long long)B * N) return;  // the whole warp leaves together
    const int row = (int)(row_id % N);
    const float* kb = k + (row_id - row) * d;
    const float* vb = v + (row_id - row) * d;
    float qv[ANY_D_PER_LANE], acc[ANY_D_PER_LANE];
#pragma unroll
    for (int c = 0; c < ANY_D_PER_LANE; ++c) {
        const int dim = lane + 32 * c;
        qv[c] = dim < d ? q[row_id * d + dim] * qscale : 0.f;
        acc[c] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int last = causal ? row : N - 1;
    for (int j = 0; j <= last; ++j) {
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < ANY_D_PER_LANE; ++c)
            if (lane + 32 * c < d) dot = fmaf(qv[c], kb[(size_t)j * d + lane + 32 * c], dot);
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(FULL_MASK, dot, offset);
        const float m_new = fmaxf(m, dot), alpha = exp2f(m - m_new), p = exp2f(dot - m_new);
        l = l * alpha + p;
#pragma unroll
        for (int c = 0; c < ANY_D_PER_LANE; ++c)
            if (lane + 32 * c < d) acc[c] = fmaf(p, vb[(size_t)j * d + lane + 32 * c], acc[c] * alpha);
        m = m_new;
    }
#pragma unroll
    for (int c = 0; c < ANY_D_PER_LANE; ++c)
        if (lane + 32 * c < d) out[row_id * d + lane + 32 * c] = acc[c] / l;
}

template <int D>
bool launch_tiled_d(const float* q, const float* k, const float* v, float* out, int B, int N, bool causal) {
    return causal ? launch_tiled<D, true>(q, k, v, out, B, N) : launch_tiled<D, false>(q, k, v, out, B, N);
}

}  // namespace

extern "C" void self_attention(const float* q, const float* k, const float* v, float* out, int B, int N, int d,
                               int causal) {
    if (B <= 0 || N <= 0 || d <= 0 || d > ANY_D_MAX) return;
    const bool aligned = ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)out) % 16 == 0;
    if (aligned && d == 64 && launch_tiled_d<64>(q, k, v, out, B, N, causal)) return;
    if (aligned && d == 128 && launch_tiled_d<128>(q, k, v, out, B, N, causal)) return;
    if (aligned && d == 32 && launch_tiled_d<32>(q, k, v, out, B, N, causal)) return;
    const long long rows = (long long)B * N;
    const unsigned blocks = (unsigned)((rows + ANY_D_WARPS - 1) / ANY_D_WARPS);
    attention_any_d<<<blocks, 32 * ANY_D_WARPS>>>(q, k, v, out, B, N, d, causal, LOG2E / sqrtf((float)d));
}
