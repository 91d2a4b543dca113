// out = softmax(q k^T / sqrt(d)) v with ThunderKittens on Hopper (the solution): bf16 q, k, v, out [B, H, N, d],
// d = 64 or 128, causal or not, any N from 1 up; float32 scores, statistics and accumulator.
// Adapted from ThunderKittens' own H100 attention forward, HazyResearch/ThunderKittens kernels/attention/mha_h100
// (MIT licence), written for the TK 2.0 headers, without its log-sum-exp output and with ragged N (keys past N
// masked, query rows past N dropped by the TMA store).
//
// - A block takes 192 query rows of one (batch, head): three consumer warpgroups of 64 rows each, one
//   producer warpgroup. A consumer warp owns 16 query rows: its share of S = Q K^T (16 x 128 per key block),
//   the running max m and sum l, and the output accumulator O (16 x d), all float32 in registers.
// - The producer (one thread of it) streams 128-key blocks of K and V with TMA into a ring of stages (4 for
//   d = 64, 2 for d = 128: what shared memory holds); a stage is reloaded once all 12 consumer warps have
//   arrived on its `kv_free` barrier. Q arrives once, by TMA too.
// - Both products are WGMMA: S = Q K^T from two shared tiles, O += P V with P straight from registers (the
//   scores' accumulator layout is the A operand's), so P never touches shared memory.
// - Online softmax in base 2: s * log2(e) / sqrt(d) folded into one multiply, exp2 (one FMA + ex2 a score).
// - Masks only where needed: the last, ragged key block (keys >= N get -inf: a zero-filled key would score 0)
//   and, causal, the key blocks a warp's rows straddle. Causal blocks stop at the diagonal and the longest
//   rows are launched first.
// - setmaxnreg: the producer keeps 32 registers a thread, the consumers take 160.
#include "kittens.cuh"
using namespace kittens;

constexpr int CONSUMERS = 3;                                   // consumer warpgroups a block
constexpr int Q_ROWS = 64;                                     // query rows a consumer warpgroup
constexpr int KV_ROWS = 128;                                   // keys (and values) a pipeline stage
constexpr int BLOCK_ROWS = CONSUMERS * Q_ROWS;                 // query rows a block: 192
constexpr int CONSUMER_WARPS = CONSUMERS * WARPGROUP_WARPS;    // 12: each arrives on kv_free
constexpr int THREADS = (CONSUMERS + 1) * WARPGROUP_WARPS * WARP_THREADS;   // + the producer: 512

template <int D> struct attention_globals {
    static constexpr int stages = D == 64 ? 4 : 2;             // 3 x 64 x d Q + 2 x stages x 128 x d K, V in 227 KB
    using q_tile = st_bf<Q_ROWS, D>;                           // Q in, O out (through the same shared memory)
    using kv_tile = st_bf<KV_ROWS, D>;
    using q_layout = gl<bf16, -1, -1, -1, D, q_tile>;          // [B, H, N, d]: TMA descriptors for 64-row tiles
    using kv_layout = gl<bf16, -1, -1, -1, D, kv_tile>;        // and for 128-row tiles
    q_layout q, o;
    kv_layout k, v;
    int n;                                                     // the sequence length
};

// Key blocks a block of queries needs: all of them, or (causal) up to its last real query's.
template <bool CAUSAL> __device__ inline int key_blocks(int n, int q_block) {
    if (!CAUSAL) return (n + KV_ROWS - 1) / KV_ROWS;
    const int last_query = min(n, (q_block + 1) * BLOCK_ROWS) - 1;
    return last_query / KV_ROWS + 1;
}

// -inf where a key does not count for a query: past N (TMA read those keys as zeros), or after the query.
// `key0`: the block's first key; `row0`: this warp's first query row. Warp-uniform branch: most blocks skip it.
template <bool CAUSAL> __device__ inline void mask_scores(rt_fl<16, KV_ROWS> &att, int key0, int row0, int n) {
    const bool ragged = key0 + KV_ROWS > n, diagonal = CAUSAL && key0 + KV_ROWS - 1 > row0;
    if (!ragged && !diagonal) return;
    warp::apply(att, att, [=] __device__(int row, int col, float s) {
        const int key = key0 + col;
        return key >= n || (CAUSAL && key > row0 + row) ? -INFINITY : s;
    });
}

template <int D, bool CAUSAL>
__global__ __launch_bounds__(THREADS, 1) void attention_kernel(const __grid_constant__ attention_globals<D> g) {
    using G = attention_globals<D>;
    constexpr int STAGES = G::stages;
    constexpr float SCALE_LOG2 = 1.44269504089f * (D == 64 ? 0.125f : 0.08838834764f);   // log2(e) / sqrt(d)
    extern __shared__ alignment_dummy smem[];
    shared_allocator allocator((int*)&smem[0]);                // 1024-byte aligned: swizzled TMA and WGMMA tiles
    typename G::q_tile (&q_smem)[CONSUMERS] = allocator.allocate<typename G::q_tile, CONSUMERS>();
    typename G::kv_tile (&k_smem)[STAGES] = allocator.allocate<typename G::kv_tile, STAGES>();
    typename G::kv_tile (&v_smem)[STAGES] = allocator.allocate<typename G::kv_tile, STAGES>();
    __shared__ semaphore q_arrived, k_arrived[STAGES], v_arrived[STAGES], kv_free[STAGES];

    const int batch = blockIdx.z, head = blockIdx.y;
    const int q_block = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;   // causal: longest rows first
    const int blocks = key_blocks<CAUSAL>(g.n, q_block);
    const int wg = warpgroup::groupid();

    if (threadIdx.x == 0) {
        init_semaphore(q_arrived, 0, 1);
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(k_arrived[s], 0, 1);                // completed by expect_bytes + the bytes landing
            init_semaphore(v_arrived[s], 0, 1);
            init_semaphore(kv_free[s], CONSUMER_WARPS, 0);     // completed when every consumer warp is done
        }
    }
    __syncthreads();

    if (wg == CONSUMERS) {                                     // the producer warpgroup
        warpgroup::decrease_registers<32>();
        if (warpgroup::laneid() == 0) {
            tma::expect_bytes(q_arrived, CONSUMERS * size_bytes<typename G::q_tile>);
            for (int c = 0; c < CONSUMERS; c++)                // tiles past N arrive as zeros
                tma::load_async(q_smem[c], g.q, {batch, head, q_block * CONSUMERS + c, 0}, q_arrived);
            for (int b = 0; b < blocks; b++) {
                const int s = b % STAGES, use = b / STAGES;
                if (use > 0) wait(kv_free[s], (use - 1) % 2);  // the consumers are done with its last use
                tma::expect_bytes(k_arrived[s], size_bytes<typename G::kv_tile>);
                tma::load_async(k_smem[s], g.k, {batch, head, b, 0}, k_arrived[s]);
                tma::expect_bytes(v_arrived[s], size_bytes<typename G::kv_tile>);
                tma::load_async(v_smem[s], g.v, {batch, head, b, 0}, v_arrived[s]);
            }
        }
        return;
    }

    warpgroup::increase_registers<160>();                      // a consumer: 3 x 128 x 160 + 128 x 32 = 64K
    rt_fl<16, KV_ROWS> att;                                    // this warp's 16 rows of S, then of P
    rt_bf<16, KV_ROWS> att_bf;                                 // P in bf16: the A operand of P V
    rt_fl<16, D> o;                                            // the output accumulator
    col_vec<rt_fl<16, KV_ROWS>> m, m_scaled, alpha, l;         // one value per row
    warp::neg_infty(m);
    warp::zero(l);
    warp::zero(o);
    const int row0 = (q_block * CONSUMERS + wg) * Q_ROWS + warpgroup::warpid() * 16;   // this warp's first query
    wait(q_arrived, 0);

    for (int b = 0; b < blocks; b++) {
        const int s = b % STAGES, phase = (b / STAGES) % 2;
        wait(k_arrived[s], phase);
        warpgroup::mm_ABt(att, q_smem[wg], k_smem[s]);         // S = Q K^T: 64 x 128 for the warpgroup
        warp::mul(alpha, m, SCALE_LOG2);                       // the old max, scaled (while the tensor cores work)
        warpgroup::mma_async_wait();

        mask_scores<CAUSAL>(att, b * KV_ROWS, row0, g.n);
        warp::row_max(m, att, m);                              // running max of the raw scores
        warp::mul(m_scaled, m, SCALE_LOG2);
        warp::mul(att, att, SCALE_LOG2);
        warp::sub_row(att, att, m_scaled);
        warp::exp2(att, att);                                  // p = e^((s - m) / sqrt(d)) <= 1; masked: 0
        warp::sub(alpha, alpha, m_scaled);
        warp::exp2(alpha, alpha);                              // e^((m_old - m) / sqrt(d)); 0 on the first block
        warp::mul(l, l, alpha);
        warp::row_sum(l, att, l);
        warp::mul_row(o, o, alpha);
        warp::copy(att_bf, att);

        wait(v_arrived[s], phase);
        warpgroup::mma_AB(o, att_bf, v_smem[s]);               // O += P V
        warpgroup::mma_async_wait();
        if (warp::laneid() == 0) arrive(kv_free[s]);           // this warp no longer reads stage s
    }

    // O / l, rounded to bf16 once, out through shared memory (this warpgroup's Q tile is free) and TMA, which
    // writes no row past N
    warp::div_row(o, o, l);
    typename G::q_tile &o_smem = q_smem[wg];
    warpgroup::store(o_smem, o);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // our writes, visible to the TMA engine
    warpgroup::sync(wg + 1);                                   // named barrier 1-3: this warpgroup only
    if (warpgroup::laneid() == 0) {
        tma::store_async(g.o, o_smem, {batch, head, q_block * CONSUMERS + wg, 0});
        tma::store_async_wait();                               // shared memory stays until the store has read it
    }
}

template <int D, bool CAUSAL>
static void launch(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int H, int N) {
    using G = attention_globals<D>;
    using q_layout = typename G::q_layout;
    using kv_layout = typename G::kv_layout;
    const size_t b = B, h = H, n = N;
    G g{q_layout{(bf16*)q, b, h, n, nullptr}, q_layout{out, b, h, n, nullptr},
        kv_layout{(bf16*)k, b, h, n, nullptr}, kv_layout{(bf16*)v, b, h, n, nullptr}, N};
    constexpr int shared = CONSUMERS * sizeof(typename G::q_tile) + 2 * G::stages * sizeof(typename G::kv_tile) + 1024;
    cudaFuncSetAttribute(attention_kernel<D, CAUSAL>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    const dim3 grid((N + BLOCK_ROWS - 1) / BLOCK_ROWS, H, B);  // the last block of queries may hang past N
    attention_kernel<D, CAUSAL><<<grid, THREADS, shared>>>(g);
}

// q, k, v, out: device pointers, [B, H, N, d] contiguous. d is 64 or 128 (others are refused: out is left
// unwritten); N is any length from 1 up; causal: query i sees keys 0..i.
extern "C" void tk_attention(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int H, int N, int d,
                             int causal) {
    if (B <= 0 || H <= 0 || N <= 0 || B > 65535 || H > 65535 || (d != 64 && d != 128)) return;
    if (d == 64)
        causal ? launch<64, true>(q, k, v, out, B, H, N) : launch<64, false>(q, k, v, out, B, H, N);
    else
        causal ? launch<128, true>(q, k, v, out, B, H, N) : launch<128, false>(q, k, v, out, B, H, N);
}
