// The CUDA FA2 forward solution's kernel, reworked toward issue 42's 350 TFLOP/s: an experiment, to be timed beside
// the solution and SDPA (scripts/design_bench.py flash-cuda) before it replaces the solution's kernel section.
//
// The solution (solutions/flash_attention_v2/flash_attention_v2.cu) runs at 281 TFLOP/s on an H100, 42% of SDPA.
// Its key loop, read in SASS (nvcc 13 for sm_90), issues about 1,100 instructions a warp for 256 mma.sync: a third
// of them copy addresses (each 16-byte chunk of a K or V tile recomputes a 64-bit row address and branches on the
// vectorized flag, and 16 of those addresses are spilled and reloaded), three barriers a block keep the four warps
// in step, and every block multiplies the 128 O registers by the rescale factor. Here:
//
//  - Tile copies: each thread copies the same chunk column of rows r, r + 8, r + 16 ...; the swizzle's XOR depends
//    on row % 8 alone, so the shared offsets are one register plus immediates and the global addresses one pointer
//    plus multiples of a stride. The vectorized flag is tested once a tile, not once a chunk.
//  - K and V both double-buffered (96 KB of shared memory a CTA at d = 128, two CTAs an SM still): block j + 1's
//    tiles are issued when block j starts, and one barrier a block both publishes block j's tiles and frees block
//    j - 1's buffers for block j + 1.
//  - The rescale only when a row's max grows by more than 2^KC_RESCALE_ABOVE (FlashAttention-4's conditional
//    rescaling): below that the old max stays the exponent's offset, p = exp2(s - m_old) is at most 2^8 (exact
//    enough in fp16/bf16, whose relative precision does not depend on size), and out = O / l and lse = m + log(l)
//    use the same m. The test is warp-wide (one vote), so a warp skips its 128 multiplies together.
//    KC_RESCALE_ABOVE=0 rescales whenever a max grows, as the solution does.
//  - KC_SPLIT=2 computes a key block in two softmax steps, the second step's scores issued before the first step's
//    softmax (FlashAttention-3's overlap of the tensor cores with the exponentials, by program order). ptxas already
//    interleaves one block's exponentials with its P V products; whether issuing S earlier gains is for the bench.
//  - KC_Q_IN_REGISTERS=1 reads the warp's Q fragments once, into registers (32 a thread at 16 rows and d = 128),
//    instead of at every block: fewer ldmatrix where the registers allow (16 query rows a warp).
//
// The rest is the solution's: 4 warps of 32 query rows (KC_WARPS, KC_WARP_ROWS and KC_MIN_BLOCKS try others), 128 x 64
// tiles at d = 128 (KC_BLOCK_N_D128 tries others), 128 x 128 at d = 64, S and P in registers, masks only where
// needed, the longest causal rows first. Checked on the CPU under tests/fixtures/warp_emulator
// (tests/test_flash_attention_v2_cuda.py); the PTX wrappers and the operator are put around it by
// scripts/fa2_forward_cuda.py.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

// ---- PTX wrappers (the solution's, put here by scripts/fa2_forward_cuda.py) --------------------------------

// ---- the kernel ------------------------------------------------------------------------------------

#ifndef KC_BLOCK_N_D128
#define KC_BLOCK_N_D128 64  // keys per block at d = 128
#endif
#ifndef KC_SPLIT
#define KC_SPLIT 1  // softmax steps a key block is computed in (2: each step's scores issued before the last's softmax)
#endif
#ifndef KC_Q_IN_REGISTERS
#define KC_Q_IN_REGISTERS 0  // 1: the warp's Q fragments read once into registers (FlashAttention-2's Is_Q_in_regs)
#endif
#ifndef KC_RESCALE_ABOVE
#define KC_RESCALE_ABOVE 8  // log2 of how far a row's max may grow before O and l are rescaled to it
#endif

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

#ifndef KC_WARPS
#define KC_WARPS 4  // warps a CTA
#endif
#ifndef KC_WARP_ROWS
#define KC_WARP_ROWS 32  // query rows a warp: 32 reads each K or V fragment for two MMAs, 16 for one
#endif
#ifndef KC_MIN_BLOCKS
#define KC_MIN_BLOCKS 2  // CTAs an SM, as __launch_bounds__ asks the register allocator for
#endif

constexpr int kWarps = KC_WARPS;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpM = KC_WARP_ROWS;      // query rows per warp
constexpr int kBlockM = kWarps * kWarpM;  // queries per CTA
constexpr int kTilesM = kWarpM / 16;      // 16-row MMA tiles per warp

template <int D>
__host__ __device__ constexpr int block_n() { return D == 64 ? 128 : KC_BLOCK_N_D128; }

template <int D>
__host__ __device__ constexpr int smem_bytes() { return (kBlockM + 4 * block_n<D>()) * D * 2; }  // Q, K and V twice

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of D 16-bit values. The chunk is
// XOR-ed with row % 8: the 8 rows one ldmatrix phase reads (same chunk) land in 8 different bank groups.
template <int D>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
    return row * (D * 2) + ((chunk ^ (row & 7)) << 4);
}

// One lane's ldmatrix addresses in a swizzled tile: its row (plus multiples of 16 rows), chunk 2 step + half
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

// One thread's share of copying ROWS rows of one head into a swizzled shared tile: chunk column `chunk` of rows
// row, row + kPassRows, row + 2 kPassRows ... kPassRows is a multiple of 8, so every pass has the same XOR: the
// shared offsets are `offset` plus immediates, the global addresses one pointer plus multiples of a stride. Rows at
// or past n_ctx are zeros: a key or value row past the end must not be garbage (0 x NaN is NaN even where p = 0).
template <int ROWS, int D>
struct TileCopy {
    static constexpr int kChunks = D / 8, kPassRows = kThreads / kChunks, kPasses = ROWS / kPassRows;
    static_assert(kPassRows % 8 == 0 && ROWS % kPassRows == 0, "every pass covers whole groups of 8 rows");
    int row, chunk;
    uint32_t offset;
    __device__ __forceinline__ TileCopy()
        : row(threadIdx.x / kChunks), chunk(threadIdx.x % kChunks), offset(swizzle<D>(row, chunk)) {}

    template <typename T>
    __device__ __forceinline__ void operator()(uint32_t tile, const T* head, const Operand& op, int row0, int n_ctx,
                                               bool vectorized) const {
        const int rows_left = n_ctx - row0;
        const T* start = head + static_cast<int64_t>(row0) * op.row;  // a real row: row0 < n_ctx
        if (vectorized) {
            const T* mine = start + static_cast<int64_t>(row) * op.row + chunk * 8;
            const int64_t pass = static_cast<int64_t>(kPassRows) * op.row;
#pragma unroll
            for (int i = 0; i < kPasses; ++i) {
                const bool valid = row + i * kPassRows < rows_left;
                cp_async_16(tile + offset + i * kPassRows * D * 2, valid ? mine + i * pass : start, valid);
            }
        } else {  // any strides (a row slice of a wider tensor): 2-byte loads, one 16-byte shared store
            const uint16_t* bits = reinterpret_cast<const uint16_t*>(start);
#pragma unroll 1
            for (int i = 0; i < kPasses; ++i) {
                const int r = row + i * kPassRows;
                const bool valid = r < rows_left;
                uint32_t w[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int64_t at = r * op.row + (chunk * 8 + 2 * j) * op.col;
                    const uint32_t lo = valid ? bits[at] : 0u, hi = valid ? bits[at + op.col] : 0u;
                    w[j] = lo | (hi << 16);
                }
                st_shared_16(tile + offset + i * kPassRows * D * 2, w);
            }
        }
    }
};

// The A operand of S = Q K^T, the warp's query rows: read from shared memory at every block (ldmatrix), or with
// KC_Q_IN_REGISTERS held in registers from the first block on (kTilesM * D / 4 a thread: 32 at 16 rows, d = 128).
template <int D, bool IN_REGISTERS = KC_Q_IN_REGISTERS != 0>
struct QOperand {
    LaneAddresses<D> qa;
    uint32_t held[IN_REGISTERS ? kTilesM : 1][IN_REGISTERS ? D / 16 : 1][4];
    __device__ __forceinline__ QOperand(uint32_t tile, int row, int half) : qa(tile, row, half) {}
    __device__ __forceinline__ void hold() {  // once Q has landed
        if constexpr (IN_REGISTERS) {
#pragma unroll
            for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
                for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(held[mt][kk], qa.at(kk, mt * 16 * D * 2));
        }
    }
    __device__ __forceinline__ void at(uint32_t (&a)[4], int kk, int mt) const {
        if constexpr (IN_REGISTERS) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = held[mt][kk][i];
        } else {
            ldmatrix_x4(a, qa.at(kk, mt * 16 * D * 2));
        }
    }
};

// s[mt][nt] = Q K^T for this warp's 16-row tiles and the block's BN / 8 tiles of 8 keys.
template <typename T, int D, int BN>
__device__ __forceinline__ void scores(float (&s)[kTilesM][BN / 8][4], const QOperand<D>& q,
                                       const LaneAddresses<D>& ka, uint32_t k_buffer) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {  // 16 columns of d at a time
        uint32_t a[kTilesM][4];
#pragma unroll
        for (int mt = 0; mt < kTilesM; ++mt) q.at(a[mt], kk, mt);
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

template <int TN>
__device__ __forceinline__ void zero(float (&s)[kTilesM][TN][4]) {
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
        for (int nt = 0; nt < TN; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
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

// Each row's max over this block (its raw scores; the 4 lanes holding a row agree on it). Whether any row of the warp
// grows by more than 2^KC_RESCALE_ABOVE: always from -inf (a first block); never for a row still at -inf (NaN > x).
template <int TN>
__device__ __forceinline__ bool block_max(const float (&s)[kTilesM][TN][4], const float (&row_max)[kTilesM][2],
                                          float (&m)[kTilesM][2], float scale_log2) {
    bool grows = false;
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // h = 0: elements 0, 1 (row lane / 4); h = 1: elements 2, 3 (row + 8)
            float x = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < TN; ++nt) x = fmaxf(x, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
            x = fmaxf(x, shfl_xor(x, 1));
            x = fmaxf(x, shfl_xor(x, 2));
            m[mt][h] = x;
            grows |= (x - row_max[mt][h]) * scale_log2 > float(KC_RESCALE_ABOVE);
        }
    return grows;
}

// Every row to its new max: l and O times alpha = exp(m_old - m_new) (0 from -inf; 1 where the max stays).
template <int TD>
__device__ __forceinline__ void rescale(float (&o)[kTilesM][TD][4], float (&row_max)[kTilesM][2],
                                        float (&row_sum)[kTilesM][2], const float (&m)[kTilesM][2], float scale_log2) {
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float m_new = fmaxf(row_max[mt][h], m[mt][h]);
            const float alpha = m_new == row_max[mt][h] ? 1.f : exp2_approx((row_max[mt][h] - m_new) * scale_log2);
            row_max[mt][h] = m_new;
            row_sum[mt][h] *= alpha;
#pragma unroll
            for (int dt = 0; dt < TD; ++dt) {
                o[mt][dt][2 * h] *= alpha;
                o[mt][dt][2 * h + 1] *= alpha;
            }
        }
}

// The online softmax over one key block: the rescale when some row's max has grown enough (a warp-wide vote),
// p = exp(s - m) with the rows' current max m, packed into the A operand of P V (the accumulator's layout).
template <typename T, int TN, int TD>
__device__ __forceinline__ void online_softmax(float (&s)[kTilesM][TN][4], uint32_t (&p)[kTilesM][TN / 2][4],
                                               float (&o)[kTilesM][TD][4], float (&row_max)[kTilesM][2],
                                               float (&row_sum)[kTilesM][2], float scale_log2) {
    float m[kTilesM][2];
    if (__any_sync(0xffffffffu, block_max(s, row_max, m, scale_log2))) rescale(o, row_max, row_sum, m, scale_log2);
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // a row that has seen nothing but -inf keeps offset 0: never -inf - (-inf) = NaN
            const float offset = row_max[mt][h] == -INFINITY ? 0.f : row_max[mt][h] * scale_log2;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < TN; ++nt) {
                s[mt][nt][2 * h] = exp2_approx(fmaf(s[mt][nt][2 * h], scale_log2, -offset));
                s[mt][nt][2 * h + 1] = exp2_approx(fmaf(s[mt][nt][2 * h + 1], scale_log2, -offset));
                sum += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
            }
            row_sum[mt][h] += sum;  // this lane's share; the 4 are added at the end
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
                                              const LaneAddresses<D>& va, uint32_t v_buffer) {
#pragma unroll
    for (int kt = 0; kt < BN / 16; ++kt) {  // 16 keys at a time
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {  // two tiles of 8 columns per ldmatrix.x4
            uint32_t b[4];
            ldmatrix_x4_trans(b, va.at(dt, v_buffer + kt * 16 * D * 2));
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
__global__ void __launch_bounds__(kThreads, KC_MIN_BLOCKS) flash_fwd_kernel(const Params p) {
    constexpr int BN = block_n<D>(), SPLIT = KC_SPLIT, SN = BN / SPLIT;
    static_assert(SN % 16 == 0, "a softmax step is whole 16-key MMA tiles");
    constexpr uint32_t kTile = BN * D * 2;  // bytes of one K or V buffer
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_address(smem);
    const uint32_t sK = sQ + kBlockM * D * 2;  // two buffers of BN rows each, then V's two
    const uint32_t sV = sK + 2 * kTile;

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

    const TileCopy<BN, D> kv_copy;
    TileCopy<kBlockM, D>()(sQ, q, p.q, m_start, n_ctx, p.vectorized);
    kv_copy(sK, k, p.k, 0, n_ctx, p.vectorized);
    kv_copy(sV, v, p.v, 0, n_ctx, p.vectorized);
    cp_async_commit();

    // Which row and chunk each lane hands ldmatrix (lanes 8i .. 8i + 7 address 8x8 tile i):
    // Q, the A operand: rows 0-15 of the warp's 16-row tile, chunk 0 (lanes 0-15) or 1 (lanes 16-31) of the step
    QOperand<D> q_rows(sQ, warp * kWarpM + (lane & 15), lane >> 4);
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
        const uint32_t buffer = (j & 1) * kTile;
        cp_async_wait<0>();  // this thread's copies of K(j) and V(j) (and Q) have landed
        __syncthreads();     // everyone's have, and every warp is done with block j - 1, whose buffers come next
        if (j == 0) q_rows.hold();
        if (j + 1 < n_blocks) {
            kv_copy(sK + (buffer ^ kTile), k, p.k, n_start + BN, n_ctx, p.vectorized);
            kv_copy(sV + (buffer ^ kTile), v, p.v, n_start + BN, n_ctx, p.vectorized);
        }
        cp_async_commit();

        // The block in SPLIT steps of SN keys, each step's scores issued before the previous step's softmax: the
        // tensor cores compute S(h + 1) while the exponentials of S(h) run (two score tiles live, SN keys each).
        float s[2][kTilesM][SN / 8][4] = {};
        scores<T, D, SN>(s[0], q_rows, ka, buffer);
#pragma unroll
        for (int h = 0; h < SPLIT; ++h) {
            if (h + 1 < SPLIT) {
                zero(s[(h + 1) & 1]);
                scores<T, D, SN>(s[(h + 1) & 1], q_rows, ka, buffer + (h + 1) * SN * D * 2);
            }
            const int key0 = n_start + h * SN;
            const bool masked = key0 + SN > n_ctx || (CAUSAL && key0 + SN - 1 > m_start);
            if (masked) mask_scores<CAUSAL>(s[h & 1], key0, m_start + warp * kWarpM, n_ctx, lane);
            uint32_t pfrag[kTilesM][SN / 16][4];
            online_softmax<T>(s[h & 1], pfrag, o, row_max, row_sum, p.scale_log2);
            accumulate_pv<T, D, SN>(o, pfrag, va, buffer + h * SN * D * 2);
        }
    }
    store_output<T, D>(out, lse, o, row_max, row_sum, m_start + warp * kWarpM, n_ctx, lane, p.scale);
}

// ---- the operator (for scripts/design_bench.py: raw pointers, no torch; scripts/fa2_forward_cuda.py) -------

template <typename T, int D, bool CAUSAL>
static cudaError_t launch(const Params& p, int batch_heads, cudaStream_t stream) {
    constexpr int smem = smem_bytes<D>();  // above the 48 KB default: must be asked for
    auto kernel = flash_fwd_kernel<T, D, CAUSAL>;
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    kernel<<<dim3((p.n_ctx + kBlockM - 1) / kBlockM, batch_heads), kThreads, smem, stream>>>(p);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t dispatch(const Params& p, int head_dim, bool causal, int bh, cudaStream_t s) {
    if (head_dim == 64) return causal ? launch<T, 64, true>(p, bh, s) : launch<T, 64, false>(p, bh, s);
    if (head_dim == 128) return causal ? launch<T, 128, true>(p, bh, s) : launch<T, 128, false>(p, bh, s);
    return cudaErrorInvalidValue;
}

// bfloat16 (or, `half` set, float16) q, k, v of shape (batch, heads, n_ctx, head_dim) with `strides` (4 each, in
// elements); out contiguous like them, lse contiguous float32 (batch, heads, n_ctx). Returns a cudaError_t (0:
// launched).
extern "C" int fa2_forward(const void* q, const void* k, const void* v, const int64_t* strides, void* out, float* lse,
                           int batch, int heads, int n_ctx, int head_dim, int causal, int vectorized, int half,
                           void* stream) {
    const double scale = 1.0 / std::sqrt(double(head_dim));
    auto operand = [&](const void* data, int i) {
        return Operand{data, strides[4 * i], strides[4 * i + 1], strides[4 * i + 2], strides[4 * i + 3]};
    };
    const Params p{operand(q, 0), operand(k, 1), operand(v, 2), out, lse, heads, n_ctx, float(scale),
                   float(1.4426950408889634 * scale), vectorized != 0};
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    return half ? dispatch<__half>(p, head_dim, causal, batch * heads, s)
                : dispatch<__nv_bfloat16>(p, head_dim, causal, batch * heads, s);
}
