// Solution — Flash Attention 2 backward in CUDA, bound as a PyTorch operator: dQ, dK, dV from the forward's
// out and log-sum-exp, nothing N x N in memory.
//
//     P = exp(S - lse)   dV = P^T dO   dP = dO V^T   delta = rowsum(dO * O)   dS = P * (dP - delta)
//     dQ = dS K / sqrt(d)   dK = dS^T Q / sqrt(d)              (S = Q K^T / sqrt(d), causal: -inf above the diagonal)
//
// FlashAttention-2's backward (Dao, 2023) on the tensor cores (mma.sync m16n8k16, ldmatrix, cp.async, as in
// the forward), in three kernels on one stream:
//  1. delta: one warp per query row, rowsum(dO * O) in float32 (the softmax backward's row term, O(N)).
//  2. dK/dV: one CTA per block of 128 keys, looping over the query blocks (causal: from its first key on).
//     Each warp owns 16 keys and computes everything transposed, keys x queries: S^T = K Q^T and
//     dP^T = V dO^T in registers, P^T = exp2(S^T log2(e)/sqrt(d) - lse log2(e)), dS^T = P^T (dP^T - delta).
//     Packed to fp16/bf16, P^T and dS^T are already the A operands of dV += P^T dO and dK += dS^T Q (the
//     accumulator's layout is the A operand's, as P is in the forward): nothing goes through shared memory
//     but the inputs, and dK, dV accumulate in float32 registers for the whole loop.
//  3. dQ: one CTA per block of 128 queries, looping over the key blocks (causal: up to its last query),
//     each warp 16 queries: S = Q K^T, dP = dO V^T, dS = P (dP - delta) in registers, dQ += dS K.
// dQ gets its own pass instead of FlashAttention-2's float32 atomicAdd from the dK/dV kernel: S and dP are
// computed twice (7 matmuls of N x N x d instead of 5), but dS never makes a round trip through shared
// memory (the dK/dV kernel holds dS^T, and dQ needs dS as an A operand), no float32 dQ buffer of
// B*H*N*d floats is zeroed, added into by N / 128 CTAs each and converted at the end, and the result is
// deterministic: the same inputs give the same bits, run after run.
//
// Rows past N need no special case in the math: their Q and dO tiles are zero-filled and their lse is +inf,
// so their P is exactly 0. Keys past N are zero-filled too; the dQ kernel masks their scores to -inf (a
// zero score is not -inf), the dK/dV kernel lets them be (they only reach dK, dV rows that are not stored).
// Shared-memory rows are XOR-swizzled in 16-byte chunks, so ldmatrix reads are free of bank conflicts.
//
// Only torch's CPU-side headers are included (no ATen/cuda/...), so the file also compiles against a
// CPU-only PyTorch; current_stream() below is what at::cuda::getCurrentCUDAStream() returns.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>

// ---- PTX wrappers: the instructions the kernel is made of -------------------------------------------

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16 bytes from global to shared memory without passing through registers; valid = false writes zeros
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>  // wait until at most PENDING of this thread's committed groups are still in flight
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory"); }

__device__ __forceinline__ void st_shared_16(uint32_t dst, const uint32_t (&w)[4]) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
}

// four 8x8 tiles of 16-bit values: lanes 8i..8i+7 give the row addresses of tile i, register i gets it
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {  // each tile transposed
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// d (16x8, fp32) += a (16x16, row-major) * b (16x8, column-major), one warp
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same_v<T, __half>) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

__device__ __forceinline__ float exp2_approx(float x) {  // 2^x, 2 ulp; 2^-inf = 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {  // two floats rounded to T, lo in the low half
    if constexpr (std::is_same_v<T, __half>) {
        const __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const uint32_t*>(&h);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const uint32_t*>(&h);
    }
}

__device__ __forceinline__ float shfl_xor(float x, int mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }

// ---- the kernel ------------------------------------------------------------------------------------

struct Operand {  // one (B, H, N, d) input: its data and its four strides, in elements
    const void* data;
    int64_t batch, head, row, col;
};

struct RowStats {  // the forward's lse, (B, H, N) float32: its data and its three strides
    const float* data;
    int64_t batch, head, row;
};

struct Params {
    Operand q, k, v, out, dout;
    RowStats lse;
    float* delta;            // contiguous (B, H, N) float32 scratch: rowsum(dO * O), written by kernel 1
    void *dq, *dk, *dv;      // contiguous (B, H, N, d), allocated by the operator
    int heads, n_ctx;
    float scale;             // 1 / sqrt(d)
    float scale_log2;        // log2(e) / sqrt(d): exp(s / sqrt(d) - lse) = exp2(s * scale_log2 - lse * log2(e))
    bool vectorized;         // q, k, v, dout rows 16-byte aligned, columns contiguous: cp.async 16 bytes at a time
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 16;                 // rows of the CTA's own block per warp: one MMA tile
constexpr int kBlockOwn = kWarps * kWarpRows;  // 128 keys per dK/dV CTA, 128 queries per dQ CTA
constexpr int kStepKV = 64;                   // queries per step of the dK/dV loop
constexpr int kStepQ = 64;                    // keys per step of the dQ loop

// shared memory: the CTA's own K and V (or Q and dO) tiles, and two buffers of the streamed pair
template <int D>
__host__ __device__ constexpr int smem_dkdv() { return (2 * kBlockOwn + 4 * kStepKV) * D * 2 + 4 * kStepKV * 4; }
template <int D>
__host__ __device__ constexpr int smem_dq() { return (2 * kBlockOwn + 4 * kStepQ) * D * 2; }

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of D 16-bit values. The chunk is
// XOR-ed with row % 8: the 8 rows one ldmatrix phase reads (same chunk) land in 8 different bank groups.
template <int D>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
    return row * (D * 2) + ((chunk ^ (row & 7)) << 4);
}

// One lane's ldmatrix addresses in a swizzled tile: its row (plus multiples of 8 rows), chunk 2 step + half
// at 16-column step `step`. The XOR only touches a chunk's low 3 bits, so the address is one of four bases
// (step % 4) plus 128 bytes per 4 steps plus the row offset: 4 registers and immediate offsets.
template <int D>
struct LaneAddresses {
    uint32_t base[4];
    __device__ __forceinline__ LaneAddresses(uint32_t tile, int row, int half) {
#pragma unroll
        for (int i = 0; i < 4; ++i) base[i] = tile + swizzle<D>(row, 2 * i + half);
    }
    __device__ __forceinline__ uint32_t at(int step, uint32_t offset) const { return base[step % 4] + (step / 4) * 128 + offset; }
};

// The three ways a warp hands ldmatrix a tile (lanes 8i .. 8i + 7 address 8x8 tile i):
// A operand (16 rows of the warp, k = d): rows 0-15, chunk 0 (lanes 0-15) or 1 (lanes 16-31) of a 16-column step
template <int D>
__device__ __forceinline__ LaneAddresses<D> a_operand(uint32_t tile, int warp, int lane) {
    return LaneAddresses<D>(tile, warp * kWarpRows + (lane & 15), lane >> 4);
}
// B operand of X Y^T (n = a row of Y, k = d): rows 0-7 chunks 0, 1 for one 8-row tile, rows 8-15 for the next
template <int D>
__device__ __forceinline__ LaneAddresses<D> b_operand(uint32_t tile, int lane) {
    return LaneAddresses<D>(tile, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
}
// B operand of P Y (k = a row of Y, n = d), transposed by ldmatrix: rows 0-15, chunk 0 then 1 (two 8-column tiles)
template <int D>
__device__ __forceinline__ LaneAddresses<D> b_operand_trans(uint32_t tile, int lane) {
    return LaneAddresses<D>(tile, lane & 15, lane >> 4);
}

// Rows row0 .. row0 + ROWS - 1 of one head into a swizzled shared tile. Rows at or past n_ctx are zeros:
// their products must be 0, never garbage (0 x NaN is NaN).
template <int ROWS, int D, typename T>
__device__ __forceinline__ void load_tile(uint32_t tile, const T* head, const Operand& op, int row0, int n_ctx,
                                          bool vectorized) {
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    static_assert(ROWS * kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
    for (int i = 0; i < ROWS * kChunks / kThreads; ++i) {
        const int index = i * kThreads + threadIdx.x;
        const int r = index / kChunks, c = index % kChunks;
        const int row = row0 + r;
        const bool valid = row < n_ctx;
        const uint32_t dst = tile + swizzle<D>(r, c);
        if (vectorized) {
            cp_async_16(dst, head + (valid ? row : row0) * op.row + c * 8, valid);  // row0 < n_ctx: a real address
        } else {  // any strides (a row slice of a wider tensor): 2-byte loads, one 16-byte shared store
            const uint16_t* bits = reinterpret_cast<const uint16_t*>(head);
            uint32_t w[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t at = row * op.row + (c * 8 + 2 * j) * op.col;
                const uint32_t lo = valid ? bits[at] : 0u, hi = valid ? bits[at + op.col] : 0u;
                w[j] = lo | (hi << 16);
            }
            st_shared_16(dst, w);
        }
    }
}

template <typename T>
__device__ __forceinline__ const T* head_of(const Operand& op, int batch, int head) {
    return static_cast<const T*>(op.data) + batch * op.batch + head * op.head;
}

// acc (the warp's 16 rows x NT * 8 columns, fp32) += X Y^T, both read from swizzled tiles of D columns: X
// the warp's 16 rows of the tile at a_offset (A operand), Y NT * 8 rows of the tile at b_offset.
template <typename T, int D, int NT>
__device__ __forceinline__ void gemm_xyt(float (&acc)[NT][4], const LaneAddresses<D>& a, uint32_t a_offset,
                                         const LaneAddresses<D>& b, uint32_t b_offset) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {  // 16 columns of d at a time
        uint32_t x[4];
        ldmatrix_x4(x, a.at(kk, a_offset));
#pragma unroll
        for (int nt = 0; nt < NT / 2; ++nt) {  // two tiles of 8 rows of Y per ldmatrix.x4
            uint32_t y[4];
            ldmatrix_x4(y, b.at(kk, b_offset + nt * 16 * D * 2));
            mma_16816<T>(acc[2 * nt], x, y[0], y[1]);
            mma_16816<T>(acc[2 * nt + 1], x, y[2], y[3]);
        }
    }
}

// acc (the warp's 16 rows x D, fp32) += P Y: P in registers as KT A operands of 16 columns, Y 16 KT rows of
// the tile at offset, row-major (row, column); the MMA wants it column-major: ldmatrix .trans on the way.
template <typename T, int D, int KT>
__device__ __forceinline__ void gemm_py(float (&acc)[D / 8][4], const uint32_t (&p)[KT][4], const LaneAddresses<D>& b,
                                        uint32_t offset) {
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) {  // 16 rows of Y at a time
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {  // two tiles of 8 columns per ldmatrix.x4
            uint32_t y[4];
            ldmatrix_x4_trans(y, b.at(dt, offset + kt * 16 * D * 2));
            mma_16816<T>(acc[2 * dt], p[kt], y[0], y[1]);
            mma_16816<T>(acc[2 * dt + 1], p[kt], y[2], y[3]);
        }
    }
}

// Accumulator tiles as the A operand of the next MMA: tiles 2 kt and 2 kt + 1 side by side, rounded to T
template <typename T, int NT>
__device__ __forceinline__ void pack_a(const float (&x)[NT][4], uint32_t (&a)[NT / 2][4]) {
#pragma unroll
    for (int kt = 0; kt < NT / 2; ++kt) {
        a[kt][0] = pack2<T>(x[2 * kt][0], x[2 * kt][1]);
        a[kt][1] = pack2<T>(x[2 * kt][2], x[2 * kt][3]);
        a[kt][2] = pack2<T>(x[2 * kt + 1][0], x[2 * kt + 1][1]);
        a[kt][3] = pack2<T>(x[2 * kt + 1][2], x[2 * kt + 1][3]);
    }
}

// The warp's 16 rows (row0 + ...) of acc * factor into a contiguous (n_ctx, D) output, rows below n_ctx.
// Accumulator element e of tile t is row lane / 4 (+ 8 for e >= 2), column 8 t + 2 (lane % 4) + e % 2.
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* out, const float (&acc)[D / 8][4], float factor, int row0, int n_ctx,
                                           int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row0 + (lane >> 2) + h * 8;
        if (row < n_ctx) {
            T* dst = out + static_cast<int64_t>(row) * D + (lane & 3) * 2;
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
                *reinterpret_cast<uint32_t*>(dst + dt * 8) = pack2<T>(acc[dt][2 * h] * factor, acc[dt][2 * h + 1] * factor);
        }
    }
}

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// 1. delta = rowsum(dO * O) in float32, one warp per query row: grid (cdiv(N, kWarps), B * H).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) flash_bwd_delta_kernel(const Params p) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n = blockIdx.x * kWarps + warp, n_ctx = p.n_ctx;
    if (n >= n_ctx) return;  // the whole warp: no barrier follows
    const int bh = blockIdx.y, batch = bh / p.heads, head = bh % p.heads;
    const T* o = head_of<T>(p.out, batch, head) + n * p.out.row;
    const T* d_o = head_of<T>(p.dout, batch, head) + n * p.dout.row;
    float sum = 0.f;
#pragma unroll
    for (int c = lane; c < D; c += 32) sum += to_float(o[c * p.out.col]) * to_float(d_o[c * p.dout.col]);
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) sum += shfl_xor(sum, mask);
    if (lane == 0) p.delta[static_cast<int64_t>(bh) * n_ctx + n] = sum;
}

// 2. dK, dV for one block of kBlockOwn keys of one (batch, head), walking the query blocks.
template <typename T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kThreads, 1) flash_bwd_dkdv_kernel(const Params p) {
    constexpr int BM = kStepKV;
    constexpr uint32_t kTile = BM * D * 2;           // bytes of one Q or dO step tile
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sK = smem_address(smem);           // K, then V right after it
    const uint32_t sV = sK + kBlockOwn * D * 2;
    const uint32_t sQD = sV + kBlockOwn * D * 2;      // two buffers of (Q tile, dO tile)
    float* s_lse = reinterpret_cast<float*>(smem + 2 * kBlockOwn * D * 2 + 4 * kTile);  // [2][BM], log2 units
    float* s_delta = s_lse + 2 * BM;                                                   // [2][BM]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n_ctx = p.n_ctx;
    const int n_start = blockIdx.x * kBlockOwn;       // causal: block 0 has the most query blocks and starts first
    const int bh = blockIdx.y, batch = bh / p.heads, head = bh % p.heads;
    const T* q = head_of<T>(p.q, batch, head);
    const T* k = head_of<T>(p.k, batch, head);
    const T* v = head_of<T>(p.v, batch, head);
    const T* dout = head_of<T>(p.dout, batch, head);
    const float* lse = p.lse.data + batch * p.lse.batch + head * p.lse.head;
    const float* delta = p.delta + static_cast<int64_t>(bh) * n_ctx;

    const int m_first = CAUSAL ? n_start / BM : 0;    // causal: queries before the block's first key see none of it
    const int m_blocks = (n_ctx + BM - 1) / BM;

    // one step's Q and dO tiles (cp.async) and its lse (in log2 units; +inf past the end: P = 0) and delta
    auto load_step = [&](int m_block, int buffer) {
        const int m_start = m_block * BM;
        load_tile<BM, D>(sQD + buffer * 2 * kTile, q, p.q, m_start, n_ctx, p.vectorized);
        load_tile<BM, D>(sQD + buffer * 2 * kTile + kTile, dout, p.dout, m_start, n_ctx, p.vectorized);
        if (threadIdx.x < BM) {
            const int row = m_start + threadIdx.x;
            s_lse[buffer * BM + threadIdx.x] = row < n_ctx ? lse[row * p.lse.row] * kLog2e : INFINITY;
            s_delta[buffer * BM + threadIdx.x] = row < n_ctx ? delta[row] : 0.f;
        }
    };

    load_tile<kBlockOwn, D>(sK, k, p.k, n_start, n_ctx, p.vectorized);
    load_tile<kBlockOwn, D>(sV, v, p.v, n_start, n_ctx, p.vectorized);
    load_step(m_first, 0);
    cp_async_commit();

    const LaneAddresses<D> own = a_operand<D>(sK, warp, lane);  // K rows of this warp; V at + kBlockOwn rows
    const LaneAddresses<D> step = b_operand<D>(sQD, lane);      // Q (dO at + kTile) as Y of X Y^T
    const LaneAddresses<D> step_t = b_operand_trans<D>(sQD, lane);  // Q (dO at + kTile) as Y of P Y
    const int key0 = n_start + warp * kWarpRows;                // this warp's first key

    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    for (int m_block = m_first; m_block < m_blocks; ++m_block) {
        const int buffer = (m_block - m_first) & 1;
        cp_async_wait<0>();  // this step's tiles have landed (they had the whole previous step to do so)
        __syncthreads();     // ... for every thread, and every warp is done with the other buffer
        if (m_block + 1 < m_blocks) load_step(m_block + 1, buffer ^ 1);
        cp_async_commit();

        const uint32_t q_tile = buffer * 2 * kTile, do_tile = q_tile + kTile;
        float st[BM / 8][4] = {}, dpt[BM / 8][4] = {};
        gemm_xyt<T, D, BM / 8>(st, own, 0, step, q_tile);                      // S^T = K Q^T (unscaled)
        gemm_xyt<T, D, BM / 8>(dpt, own, kBlockOwn * D * 2, step, do_tile);    // dP^T = V dO^T

        const int m_start = m_block * BM;
        const bool diagonal = CAUSAL && m_start < n_start + kBlockOwn - 1;   // some query of the step before some key
        const float* lse2 = s_lse + buffer * BM;
        const float* dlt = s_delta + buffer * BM;
#pragma unroll
        for (int nt = 0; nt < BM / 8; ++nt) {
            const int col = nt * 8 + (lane & 3) * 2;  // this lane's two queries of the tile, in the step
            const float2 l2 = *reinterpret_cast<const float2*>(lse2 + col);
            const float2 dl = *reinterpret_cast<const float2*>(dlt + col);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = key0 + (lane >> 2) + (e >> 1) * 8, query = m_start + col + (e & 1);
                float pt = exp2_approx(fmaf(st[nt][e], p.scale_log2, -((e & 1) ? l2.y : l2.x)));
                if (diagonal && query < key) pt = 0.f;
                st[nt][e] = pt;                                               // P^T
                dpt[nt][e] = pt * (dpt[nt][e] - ((e & 1) ? dl.y : dl.x));    // dS^T = P^T (dP^T - delta)
            }
        }
        uint32_t pt_a[BM / 16][4], dst_a[BM / 16][4];
        pack_a<T>(st, pt_a);
        pack_a<T>(dpt, dst_a);
        gemm_py<T, D, BM / 16>(dv, pt_a, step_t, do_tile);  // dV += P^T dO
        gemm_py<T, D, BM / 16>(dk, dst_a, step_t, q_tile);  // dK += dS^T Q
    }
    T* dk_out = static_cast<T*>(p.dk) + static_cast<int64_t>(bh) * n_ctx * D;
    T* dv_out = static_cast<T*>(p.dv) + static_cast<int64_t>(bh) * n_ctx * D;
    store_rows<T, D>(dk_out, dk, p.scale, key0, n_ctx, lane);
    store_rows<T, D>(dv_out, dv, 1.f, key0, n_ctx, lane);
}

// 3. dQ for one block of kBlockOwn queries of one (batch, head), walking the key blocks.
template <typename T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kThreads, 1) flash_bwd_dq_kernel(const Params p) {
    constexpr int BN = kStepQ;
    constexpr uint32_t kTile = BN * D * 2;            // bytes of one K or V step tile
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_address(smem);            // Q, then dO right after it
    const uint32_t sDO = sQ + kBlockOwn * D * 2;
    const uint32_t sKV = sDO + kBlockOwn * D * 2;      // two buffers of (K tile, V tile)

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n_ctx = p.n_ctx;
    // causal: the last query blocks (the longest rows) start first, the short ones fill the grid's tail
    const int m_block = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m_start = m_block * kBlockOwn;
    const int bh = blockIdx.y, batch = bh / p.heads, head = bh % p.heads;
    const T* q = head_of<T>(p.q, batch, head);
    const T* k = head_of<T>(p.k, batch, head);
    const T* v = head_of<T>(p.v, batch, head);
    const T* dout = head_of<T>(p.dout, batch, head);
    const float* lse = p.lse.data + batch * p.lse.batch + head * p.lse.head;
    const float* delta = p.delta + static_cast<int64_t>(bh) * n_ctx;

    const int n_end = CAUSAL ? min(m_start + kBlockOwn, n_ctx) : n_ctx;  // causal: nothing above the diagonal
    const int n_blocks = (n_end + BN - 1) / BN;

    load_tile<kBlockOwn, D>(sQ, q, p.q, m_start, n_ctx, p.vectorized);
    load_tile<kBlockOwn, D>(sDO, dout, p.dout, m_start, n_ctx, p.vectorized);
    load_tile<BN, D>(sKV, k, p.k, 0, n_ctx, p.vectorized);
    load_tile<BN, D>(sKV + kTile, v, p.v, 0, n_ctx, p.vectorized);
    cp_async_commit();

    // this lane's two rows: lse in log2 units (+inf past the end: P = 0) and delta
    const int row0 = m_start + warp * kWarpRows;
    float lse2[2], dlt[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row0 + (lane >> 2) + h * 8;
        lse2[h] = row < n_ctx ? lse[row * p.lse.row] * kLog2e : INFINITY;
        dlt[h] = row < n_ctx ? delta[row] : 0.f;
    }

    const LaneAddresses<D> own = a_operand<D>(sQ, warp, lane);  // Q rows of this warp; dO at + kBlockOwn rows
    const LaneAddresses<D> step = b_operand<D>(sKV, lane);      // K (V at + kTile) as Y of X Y^T
    const LaneAddresses<D> step_t = b_operand_trans<D>(sKV, lane);  // K as Y of P Y

    float dq[D / 8][4] = {};
    for (int n_block = 0; n_block < n_blocks; ++n_block) {
        const int buffer = n_block & 1;
        cp_async_wait<0>();
        __syncthreads();
        if (n_block + 1 < n_blocks) {
            const uint32_t next = sKV + (buffer ^ 1) * 2 * kTile;
            load_tile<BN, D>(next, k, p.k, (n_block + 1) * BN, n_ctx, p.vectorized);
            load_tile<BN, D>(next + kTile, v, p.v, (n_block + 1) * BN, n_ctx, p.vectorized);
        }
        cp_async_commit();

        const uint32_t k_tile = buffer * 2 * kTile, v_tile = k_tile + kTile;
        float s[BN / 8][4] = {}, dp[BN / 8][4] = {};
        gemm_xyt<T, D, BN / 8>(s, own, 0, step, k_tile);                     // S = Q K^T (unscaled)
        gemm_xyt<T, D, BN / 8>(dp, own, kBlockOwn * D * 2, step, v_tile);   // dP = dO V^T

        const int n_start = n_block * BN;
        const bool masked = n_start + BN > n_ctx || (CAUSAL && n_start + BN - 1 > m_start);
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int h = e >> 1, row = row0 + (lane >> 2) + h * 8, key = n_start + nt * 8 + (lane & 3) * 2 + (e & 1);
                float pr = exp2_approx(fmaf(s[nt][e], p.scale_log2, -lse2[h]));
                if (masked && (key >= n_ctx || (CAUSAL && key > row))) pr = 0.f;  // zero-filled keys score 0, not -inf
                dp[nt][e] = pr * (dp[nt][e] - dlt[h]);                              // dS = P (dP - delta)
            }
        uint32_t ds_a[BN / 16][4];
        pack_a<T>(dp, ds_a);
        gemm_py<T, D, BN / 16>(dq, ds_a, step_t, k_tile);  // dQ += dS K
    }
    store_rows<T, D>(static_cast<T*>(p.dq) + static_cast<int64_t>(bh) * n_ctx * D, dq, p.scale, row0, n_ctx, lane);
}

// ---- the operator ----------------------------------------------------------------------------------

static cudaStream_t current_stream(const c10::Device& device) {
    return static_cast<cudaStream_t>(c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle());
}

static void check_launch(const char* what) {
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "flash_attention_v2_backward: ", what, " launch failed: ", cudaGetErrorString(err));
}

template <typename Kernel>
static void allow_shared_memory(Kernel kernel, int bytes) {  // above the 48 KB default: must be asked for
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    TORCH_CHECK(err == cudaSuccess, "flash_attention_v2_backward: cannot get ", bytes, " bytes of shared memory: ",
                cudaGetErrorString(err));
}

template <typename T, int D, bool CAUSAL>
static void launch(const Params& p, int batch_heads, cudaStream_t stream) {
    const unsigned n_ctx = static_cast<unsigned>(p.n_ctx);
    flash_bwd_delta_kernel<T, D><<<dim3((n_ctx + kWarps - 1) / kWarps, batch_heads), kThreads, 0, stream>>>(p);
    check_launch("delta kernel");

    auto dq_kernel = flash_bwd_dq_kernel<T, D, CAUSAL>;
    allow_shared_memory(dq_kernel, smem_dq<D>());
    dq_kernel<<<dim3((n_ctx + kBlockOwn - 1) / kBlockOwn, batch_heads), kThreads, smem_dq<D>(), stream>>>(p);
    check_launch("dQ kernel");

    auto dkdv_kernel = flash_bwd_dkdv_kernel<T, D, CAUSAL>;
    allow_shared_memory(dkdv_kernel, smem_dkdv<D>());
    dkdv_kernel<<<dim3((n_ctx + kBlockOwn - 1) / kBlockOwn, batch_heads), kThreads, smem_dkdv<D>(), stream>>>(p);
    check_launch("dK/dV kernel");
}

template <typename T>
static void dispatch(const Params& p, int64_t head_dim, bool causal, int batch_heads, cudaStream_t stream) {
    if (head_dim == 64)
        causal ? launch<T, 64, true>(p, batch_heads, stream) : launch<T, 64, false>(p, batch_heads, stream);
    else
        causal ? launch<T, 128, true>(p, batch_heads, stream) : launch<T, 128, false>(p, batch_heads, stream);
}

static Operand operand(const at::Tensor& t) {
    return {t.const_data_ptr(), t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// 16-byte copies need every row start 16-byte aligned and its d values next to each other
static bool rows_aligned(const at::Tensor& t) {
    return t.stride(3) == 1 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 && t.stride(2) % 8 == 0 &&
           reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0;
}

static void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& lse, const at::Tensor& dout) {
    for (const at::Tensor* t : {&q, &k, &v, &out, &dout}) {
        TORCH_CHECK(t->is_cuda() && t->device() == q.device(),
                    "flash_attention_v2_backward: q, k, v, out, lse and dout must be on the same CUDA device");
        TORCH_CHECK(t->dim() == 4 && t->sizes() == q.sizes(),
                    "flash_attention_v2_backward: q, k, v, out and dout must have the same shape (batch, heads, seq_len, "
                    "head_dim); got ", q.sizes(), " and ", t->sizes());
        TORCH_CHECK(t->scalar_type() == q.scalar_type(),
                    "flash_attention_v2_backward: q, k, v, out and dout must have the same dtype");
    }
    TORCH_CHECK(lse.is_cuda() && lse.device() == q.device() && lse.scalar_type() == at::kFloat && lse.dim() == 3 &&
                    lse.size(0) == q.size(0) && lse.size(1) == q.size(1) && lse.size(2) == q.size(2),
                "flash_attention_v2_backward: lse must be float32 of shape (batch, heads, seq_len) on q's device; got ",
                lse.scalar_type(), " ", lse.sizes());
    TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
                "flash_attention_v2_backward: float16 or bfloat16 inputs only; got ", q.scalar_type());
    TORCH_CHECK(q.size(3) == 64 || q.size(3) == 128, "flash_attention_v2_backward: head_dim 64 or 128 only; got ",
                q.size(3));
    TORCH_CHECK(q.size(0) * q.size(1) <= 65535,
                "flash_attention_v2_backward: batch * heads must be at most 65535 (the grid's y limit)");
    TORCH_CHECK(q.size(2) < (1 << 30), "flash_attention_v2_backward: seq_len must be below 2^30");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_v2_backward_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& dout, bool causal) {
    check_inputs(q, k, v, out, lse, dout);
    const c10::DeviceGuard guard(q.device());
    // contiguous outputs: the kernels write 4-byte pairs; delta: 4 bytes a row of scratch, O(N)
    at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(q.sizes(), q.options()),
               dv = at::empty(q.sizes(), q.options());
    if (q.numel() == 0) return {dq, dk, dv};
    at::Tensor delta = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    const double scale = 1.0 / std::sqrt(double(q.size(3)));
    const Params p{operand(q), operand(k), operand(v), operand(out), operand(dout),
                   RowStats{lse.const_data_ptr<float>(), lse.stride(0), lse.stride(1), lse.stride(2)},
                   delta.mutable_data_ptr<float>(), dq.mutable_data_ptr(), dk.mutable_data_ptr(), dv.mutable_data_ptr(),
                   static_cast<int>(q.size(1)), static_cast<int>(q.size(2)), static_cast<float>(scale),
                   static_cast<float>(1.4426950408889634 * scale),
                   rows_aligned(q) && rows_aligned(k) && rows_aligned(v) && rows_aligned(dout)};
    const int batch_heads = static_cast<int>(q.size(0) * q.size(1));
    const cudaStream_t stream = current_stream(q.device());
    if (q.scalar_type() == at::kHalf)
        dispatch<__half>(p, q.size(3), causal, batch_heads, stream);
    else
        dispatch<__nv_bfloat16>(p, q.size(3), causal, batch_heads, stream);
    return {dq, dk, dv};
}

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
    m.def("flash_attention_v2_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal) "
          "-> (Tensor dq, Tensor dk, Tensor dv)");
}

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) {
    m.impl("flash_attention_v2_backward", &flash_attention_v2_backward_cuda);
}
