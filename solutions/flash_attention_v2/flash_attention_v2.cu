// Solution — Flash Attention 2 forward in CUDA, bound as a PyTorch operator: out and the log-sum-exp.
//
// FlashAttention-2's forward (Dao, 2023) on the tensor cores, with the Ampere instructions an H100 also
// runs: mma.sync m16n8k16 (fp16/bf16 in, fp32 accumulate), ldmatrix and cp.async. Beside `out` it writes
// each row's natural-log log-sum-exp, lse = m / sqrt(d) + log(l) (m the row's largest raw score, l the
// sum of exp((s - m) / sqrt(d))): the backward rebuilds P = exp(S - lse) from it, block by block.
//
// FA2's work partitioning: one CTA per block of queries of one (batch, head) loops over *all* its keys
// (no CTA ever combines partial results with another), and inside the CTA the warps split the query rows,
// not the keys (FA1's split-K across warps had to exchange row maxima and sums through shared memory).
// O stays un-normalised in registers and is divided by l once, after the loop.
//
// One CTA of 4 warps per block of 128 queries of one (batch, head). Each warp owns 32 query rows (two
// 16-row MMA tiles), so every K or V fragment it reads from shared memory feeds two MMAs: with 16 rows
// a warp, shared memory bandwidth, not the tensor cores, would set the pace. The query tile is loaded
// once; key/value tiles of BLOCK_N rows stream through shared memory (K double-buffered, V single: V(j)
// lands while S = Q K(j)^T is computed, K(j+1) during the whole of block j).
// The scores never leave registers: the MMA accumulator's layout is the next MMA's A-operand layout, so
// P = exp(S - m) is packed into fp16/bf16 pairs in place. Online softmax in fp32 (a running max m and
// sum l per row): exp(s / sqrt(d)) = exp2(s * log2(e) / sqrt(d)), one FMA and one ex2.approx per score.
// Masks only where needed (the ragged last key block, the causal diagonal); causal CTAs skip every block
// above the diagonal, and the longest rows start first. Shared-memory rows are XOR-swizzled in 16-byte
// chunks so that the 8 rows each ldmatrix phase reads sit in 8 different banks.
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

struct Params {
    Operand q, k, v;
    void* out;         // contiguous (B, H, N, d), allocated by the operator
    float* lse;        // contiguous (B, H, N) float32, allocated by the operator
    int heads, n_ctx;
    float scale;       // 1 / sqrt(d): lse is in units of the scaled scores
    float scale_log2;  // log2(e) / sqrt(d): exp(s / sqrt(d)) = exp2(s * scale_log2)
    bool vectorized;   // q, k, v rows 16-byte aligned, columns contiguous: cp.async 16 bytes at a time
};

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockM = 128;              // queries per CTA
constexpr int kWarpM = kBlockM / kWarps;  // 32 query rows per warp
constexpr int kTilesM = kWarpM / 16;      // two 16-row MMA tiles per warp

// keys per block: d = 128 keeps 64 (S: 64 registers, O: 128 a thread); d = 64 affords 128 (S 128, O 64)
template <int D>
__host__ __device__ constexpr int block_n() { return D == 64 ? 128 : 64; }

template <int D>
__host__ __device__ constexpr int smem_bytes() { return (kBlockM + 3 * block_n<D>()) * D * 2; }  // Q, two K buffers, one V

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of D 16-bit values. The chunk is
// XOR-ed with row % 8: the 8 rows one ldmatrix phase reads (same chunk) land in 8 different bank groups.
template <int D>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
    return row * (D * 2) + ((chunk ^ (row & 7)) << 4);
}

// One lane's ldmatrix addresses in a swizzled tile: its row (plus multiples of 16 rows), chunk 2 step + half
// at 16-column step `step`. The XOR only touches a chunk's low 3 bits, so the address is one of four bases
// (step % 4) plus 128 bytes per 4 steps plus the row offset: 4 registers and immediate offsets, not one
// register per unrolled step (which the compiler would hoist out of the key loop, and spill).
template <int D>
struct LaneAddresses {
    uint32_t base[4];
    __device__ __forceinline__ LaneAddresses(uint32_t tile, int row, int half) {
#pragma unroll
        for (int i = 0; i < 4; ++i) base[i] = tile + swizzle<D>(row, 2 * i + half);
    }
    __device__ __forceinline__ uint32_t at(int step, uint32_t offset) const { return base[step % 4] + (step / 4) * 128 + offset; }
};

// Rows row0 .. row0 + ROWS - 1 of one head into a swizzled shared tile. Rows at or past n_ctx are zeros:
// a key or value row past the end must not be garbage (0 x NaN is NaN even where p = 0).
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

// s[mt][nt] = Q K^T for this warp's two 16-row tiles and the block's BN / 8 tiles of 8 keys.
template <typename T, int D, int BN>
__device__ __forceinline__ void scores(float (&s)[kTilesM][BN / 8][4], const LaneAddresses<D>& qa,
                                       const LaneAddresses<D>& ka, uint32_t k_buffer) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {  // 16 columns of d at a time
        uint32_t a[kTilesM][4];
#pragma unroll
        for (int mt = 0; mt < kTilesM; ++mt) ldmatrix_x4(a[mt], qa.at(kk, mt * 16 * D * 2));
#pragma unroll
        for (int nt = 0; nt < BN / 16; ++nt) {  // B: two tiles of 8 keys per ldmatrix.x4
            uint32_t b[4];
            ldmatrix_x4(b, ka.at(kk, k_buffer + nt * 16 * D * 2));
#pragma unroll
            for (int mt = 0; mt < kTilesM; ++mt) {
                mma_16816<T>(s[mt][2 * nt], a[mt], b[0], b[1]);
                mma_16816<T>(s[mt][2 * nt + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// -inf for keys past the end and, causal, keys after the query. Accumulator element e of tile (mt, nt)
// is row lane / 4 (+ 8 for e >= 2), key 2 * (lane % 4) + e % 2 of the tile.
template <bool CAUSAL, int TN>
__device__ __forceinline__ void mask_scores(float (&s)[kTilesM][TN][4], int n_start, int row0, int n_ctx, int lane) {
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
        for (int nt = 0; nt < TN; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = row0 + mt * 16 + (lane >> 2) + (e >> 1) * 8;
                const int key = n_start + nt * 8 + (lane & 3) * 2 + (e & 1);
                if (key >= n_ctx || (CAUSAL && key > row)) s[mt][nt][e] = -INFINITY;
            }
}

// The online softmax over one key block: new row max, rescale of l and O by alpha = exp(m_old - m_new),
// p = exp(s - m_new) packed into the A operand of P V (same layout as the accumulator: no data moves).
template <typename T, int TN, int TD>
__device__ __forceinline__ void online_softmax(float (&s)[kTilesM][TN][4], uint32_t (&p)[kTilesM][TN / 2][4],
                                               float (&o)[kTilesM][TD][4], float (&row_max)[kTilesM][2],
                                               float (&row_sum)[kTilesM][2], float scale_log2) {
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // h = 0: elements 0, 1 (row lane / 4); h = 1: elements 2, 3 (row + 8)
            float m_new = row_max[mt][h];
#pragma unroll
            for (int nt = 0; nt < TN; ++nt) m_new = fmaxf(m_new, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
            m_new = fmaxf(m_new, shfl_xor(m_new, 1));  // the 4 lanes holding a row agree on its max
            m_new = fmaxf(m_new, shfl_xor(m_new, 2));
            // a row that has seen nothing but -inf keeps offset 0: never -inf - (-inf) = NaN
            const float offset = m_new == -INFINITY ? 0.f : m_new * scale_log2;
            const float alpha = exp2_approx(row_max[mt][h] * scale_log2 - offset);  // 0 on the first block
            row_max[mt][h] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < TN; ++nt) {
                s[mt][nt][2 * h] = exp2_approx(fmaf(s[mt][nt][2 * h], scale_log2, -offset));
                s[mt][nt][2 * h + 1] = exp2_approx(fmaf(s[mt][nt][2 * h + 1], scale_log2, -offset));
                sum += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
            }
            row_sum[mt][h] = row_sum[mt][h] * alpha + sum;  // this lane's share; the 4 are added at the end
#pragma unroll
            for (int dt = 0; dt < TD; ++dt) {
                o[mt][dt][2 * h] *= alpha;
                o[mt][dt][2 * h + 1] *= alpha;
            }
        }
#pragma unroll
        for (int kt = 0; kt < TN / 2; ++kt) {  // A operand of 16 keys = accumulator tiles 2 kt and 2 kt + 1
            p[mt][kt][0] = pack2<T>(s[mt][2 * kt][0], s[mt][2 * kt][1]);
            p[mt][kt][1] = pack2<T>(s[mt][2 * kt][2], s[mt][2 * kt][3]);
            p[mt][kt][2] = pack2<T>(s[mt][2 * kt + 1][0], s[mt][2 * kt + 1][1]);
            p[mt][kt][3] = pack2<T>(s[mt][2 * kt + 1][2], s[mt][2 * kt + 1][3]);
        }
    }
}

// o += P V: V is row-major (key, column), the MMA wants it column-major: ldmatrix .trans on the way.
template <typename T, int D, int BN>
__device__ __forceinline__ void accumulate_pv(float (&o)[kTilesM][D / 8][4], const uint32_t (&p)[kTilesM][BN / 16][4],
                                              const LaneAddresses<D>& va) {
#pragma unroll
    for (int kt = 0; kt < BN / 16; ++kt) {  // 16 keys at a time
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {  // two tiles of 8 columns per ldmatrix.x4
            uint32_t b[4];
            ldmatrix_x4_trans(b, va.at(dt, kt * 16 * D * 2));
#pragma unroll
            for (int mt = 0; mt < kTilesM; ++mt) {
                mma_16816<T>(o[mt][2 * dt], p[mt][kt], b[0], b[1]);
                mma_16816<T>(o[mt][2 * dt + 1], p[mt][kt], b[2], b[3]);
            }
        }
    }
}

// out = O / l and lse = m / sqrt(d) + log(l), rows below n_ctx only; l is summed over the 4 lanes that share
// a row (m they already agree on). Every real row has seen at least one key (causal row i sees key 0..i), so
// l >= 1 there: the lse is finite. Rows past n_ctx may have l = 0; they are not stored.
template <typename T, int D>
__device__ __forceinline__ void store_output(T* out, float* lse, float (&o)[kTilesM][D / 8][4],
                                             const float (&row_max)[kTilesM][2], const float (&row_sum)[kTilesM][2],
                                             int row0, int n_ctx, int lane, float scale) {
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = row_sum[mt][h];
            l += shfl_xor(l, 1);
            l += shfl_xor(l, 2);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int row = row0 + mt * 16 + (lane >> 2) + h * 8;
            if (row < n_ctx && (lane & 3) == 0) lse[row] = row_max[mt][h] * scale + logf(l);
            if (row < n_ctx) {
                T* dst = out + static_cast<int64_t>(row) * D + (lane & 3) * 2;
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt)
                    *reinterpret_cast<uint32_t*>(dst + dt * 8) = pack2<T>(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
            }
        }
}

template <typename T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kThreads, 2) flash_fwd_kernel(const Params p) {
    constexpr int BN = block_n<D>();
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_address(smem);
    const uint32_t sK = sQ + kBlockM * D * 2;  // two buffers of BN rows
    const uint32_t sV = sK + 2 * BN * D * 2;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // causal: the last query blocks (the longest rows) start first, the short ones fill the grid's tail
    const int m_block = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int m_start = m_block * kBlockM;
    const int n_ctx = p.n_ctx;
    const int batch = blockIdx.y / p.heads, head = blockIdx.y % p.heads;
    const T* q = static_cast<const T*>(p.q.data) + batch * p.q.batch + head * p.q.head;
    const T* k = static_cast<const T*>(p.k.data) + batch * p.k.batch + head * p.k.head;
    const T* v = static_cast<const T*>(p.v.data) + batch * p.v.batch + head * p.v.head;
    T* out = static_cast<T*>(p.out) + static_cast<int64_t>(blockIdx.y) * n_ctx * D;
    float* lse = p.lse + static_cast<int64_t>(blockIdx.y) * n_ctx;

    const int n_end = CAUSAL ? min(m_start + kBlockM, n_ctx) : n_ctx;  // causal: nothing above the diagonal
    const int n_blocks = (n_end + BN - 1) / BN;

    load_tile<kBlockM, D>(sQ, q, p.q, m_start, n_ctx, p.vectorized);
    cp_async_commit();
    load_tile<BN, D>(sK, k, p.k, 0, n_ctx, p.vectorized);
    cp_async_commit();

    // Which row and chunk each lane hands ldmatrix (lanes 8i .. 8i + 7 address 8x8 tile i):
    // Q, the A operand: rows 0-15 of the warp's 16-row tile, chunk 0 (lanes 0-15) or 1 (lanes 16-31) of the step
    const LaneAddresses<D> qa(sQ, warp * kWarpM + (lane & 15), lane >> 4);
    // K, the B operand of S (k = d): keys 0-7, chunks 0 and 1 for the first 8-key tile, keys 8-15 for the second
    const LaneAddresses<D> ka(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    // V, the B operand of O (k = key), transposed by ldmatrix: keys 0-15, chunk 0 then 1 (two 8-column tiles)
    const LaneAddresses<D> va(sV, lane & 15, lane >> 4);

    float o[kTilesM][D / 8][4] = {};
    float row_max[kTilesM][2], row_sum[kTilesM][2];
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt)
        for (int h = 0; h < 2; ++h) row_max[mt][h] = -INFINITY, row_sum[mt][h] = 0.f;

    for (int j = 0; j < n_blocks; ++j) {
        const int n_start = j * BN;
        // V(j) into its one buffer and K(j + 1) into the K buffer not in use, while only O is live
        __syncthreads();  // every warp is done with V(j - 1) and with K(j - 1), the buffer K(j + 1) fills
        load_tile<BN, D>(sV, v, p.v, n_start, n_ctx, p.vectorized);
        cp_async_commit();
        if (j + 1 < n_blocks) load_tile<BN, D>(sK + ((j + 1) & 1) * (BN * D * 2), k, p.k, n_start + BN, n_ctx, p.vectorized);
        cp_async_commit();   // an empty group after the last block keeps the counting the same
        cp_async_wait<2>();  // Q and K(j) have landed; V(j) and K(j + 1) may still be in flight
        __syncthreads();

        float s[kTilesM][BN / 8][4] = {};
        scores<T, D, BN>(s, qa, ka, (j & 1) * (BN * D * 2));
        const bool masked = n_start + BN > n_ctx || (CAUSAL && n_start + BN - 1 > m_start);
        if (masked) mask_scores<CAUSAL>(s, n_start, m_start + warp * kWarpM, n_ctx, lane);
        uint32_t pfrag[kTilesM][BN / 16][4];
        online_softmax<T>(s, pfrag, o, row_max, row_sum, p.scale_log2);

        cp_async_wait<1>();  // V(j) has landed; K(j + 1) may still be in flight
        __syncthreads();
        accumulate_pv<T, D, BN>(o, pfrag, va);
    }
    store_output<T, D>(out, lse, o, row_max, row_sum, m_start + warp * kWarpM, n_ctx, lane, p.scale);
}

// ---- the operator ----------------------------------------------------------------------------------

static cudaStream_t current_stream(const c10::Device& device) {
    return static_cast<cudaStream_t>(c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle());
}

template <typename T, int D, bool CAUSAL>
static void launch(const Params& p, int batch_heads, cudaStream_t stream) {
    constexpr int smem = smem_bytes<D>();  // above the 48 KB default: must be asked for
    auto kernel = flash_fwd_kernel<T, D, CAUSAL>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    TORCH_CHECK(err == cudaSuccess, "flash_attention_v2: cannot get ", smem, " bytes of shared memory: ", cudaGetErrorString(err));
    const dim3 grid((p.n_ctx + kBlockM - 1) / kBlockM, batch_heads);
    kernel<<<grid, kThreads, smem, stream>>>(p);
    err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "flash_attention_v2: kernel launch failed: ", cudaGetErrorString(err));
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

static void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    for (const at::Tensor* t : {&q, &k, &v}) {
        TORCH_CHECK(t->is_cuda() && t->device() == q.device(), "flash_attention_v2: q, k and v must be on the same CUDA device");
        TORCH_CHECK(t->dim() == 4 && t->sizes() == q.sizes(),
                    "flash_attention_v2: q, k and v must have the same shape (batch, heads, seq_len, head_dim); got ",
                    q.sizes(), ", ", k.sizes(), ", ", v.sizes());
        TORCH_CHECK(t->scalar_type() == q.scalar_type(), "flash_attention_v2: q, k and v must have the same dtype");
    }
    TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
                "flash_attention_v2: float16 or bfloat16 inputs only; got ", q.scalar_type());
    TORCH_CHECK(q.size(3) == 64 || q.size(3) == 128, "flash_attention_v2: head_dim 64 or 128 only; got ", q.size(3));
    TORCH_CHECK(q.size(0) * q.size(1) <= 65535, "flash_attention_v2: batch * heads must be at most 65535 (the grid's y limit)");
    TORCH_CHECK(q.size(2) < (1 << 30), "flash_attention_v2: seq_len must be below 2^30");
}

std::tuple<at::Tensor, at::Tensor> flash_attention_v2_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                            bool causal) {
    check_inputs(q, k, v);
    const c10::DeviceGuard guard(q.device());
    at::Tensor out = at::empty(q.sizes(), q.options());  // contiguous: the kernel writes 4-byte pairs
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    if (q.numel() == 0) return {out, lse};
    const double scale = 1.0 / std::sqrt(double(q.size(3)));
    const Params p{operand(q), operand(k), operand(v), out.mutable_data_ptr(), lse.mutable_data_ptr<float>(),
                   static_cast<int>(q.size(1)), static_cast<int>(q.size(2)), static_cast<float>(scale),
                   static_cast<float>(1.4426950408889634 * scale), rows_aligned(q) && rows_aligned(k) && rows_aligned(v)};
    const int batch_heads = static_cast<int>(q.size(0) * q.size(1));
    const cudaStream_t stream = current_stream(q.device());
    if (q.scalar_type() == at::kHalf)
        dispatch<__half>(p, q.size(3), causal, batch_heads, stream);
    else
        dispatch<__nv_bfloat16>(p, q.size(3), causal, batch_heads, stream);
    return {out, lse};
}

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
    m.def("flash_attention_v2(Tensor q, Tensor k, Tensor v, bool causal) -> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("flash_attention_v2", &flash_attention_v2_cuda); }
