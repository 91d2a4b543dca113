// Ladder step 2: WGMMA from shared tiles, one warpgroup, synchronous loads (the stub's launcher as it is).
// The simplest ThunderKittens attention on the Hopper tensor cores: no TMA, no mbarrier, no pipeline, so
// it is the reference for the rest of the ladder's masks and softmax (and a fallback while a pipelined
// kernel is being debugged). About 15-25% of SDPA at N = 4096 (estimate): every load waits, and the tensor
// cores sit idle while K and V arrive.
#include "kittens.cuh"
using namespace kittens;

constexpr int TILE = 64;                                     // query rows a block; keys a K / V tile
constexpr int THREADS = WARPGROUP_WARPS * WARP_THREADS;      // one warpgroup: 4 warps of 32 threads

template <int D> struct attention_globals {
    using tile = st_bf<TILE, D>;                             // a shared-memory tile: 64 rows of one head
    using layout = gl<bf16, -1, -1, -1, D, tile>;            // batch, heads, rows known at run time; d fixed
    layout q, k, v, o;
    int n;                                                   // the sequence length
};

// Scores that do not count: keys past N (read as zeros: a score of 0, not -inf) and, causal, keys after the query.
template <bool CAUSAL> __device__ inline void mask_tile(rt_fl<16, TILE> &s, int key0, int row0, int n) {
    if (key0 + TILE <= n && !(CAUSAL && key0 + TILE - 1 > row0)) return;   // the whole tile counts
    warp::apply(s, s, [=] __device__(int row, int col, float x) {
        return key0 + col >= n || (CAUSAL && key0 + col > row0 + row) ? -INFINITY : x;
    });
}

template <int D, bool CAUSAL>
__global__ __launch_bounds__(THREADS) void attention_kernel(const __grid_constant__ attention_globals<D> g) {
    using tile = typename attention_globals<D>::tile;
    constexpr float scale = 1.44269504089f * (D == 64 ? 0.125f : 0.08838834764f);   // log2(e) / sqrt(d): exp2
    extern __shared__ alignment_dummy smem[];
    shared_allocator allocator((int*)&smem[0]);
    tile &q_s = allocator.allocate<tile>();
    tile &k_s = allocator.allocate<tile>();
    tile &v_s = allocator.allocate<tile>();
    const int batch = blockIdx.z, head = blockIdx.y, q_tile = blockIdx.x;
    const int first_row = q_tile * TILE + warpgroup::warpid() * 16;
    const int last_query = min(g.n, (q_tile + 1) * TILE) - 1;
    const int tiles = CAUSAL ? last_query / TILE + 1 : (g.n + TILE - 1) / TILE;   // causal: up to the diagonal

    rt_fl<16, TILE> s;                                       // this warp's 16 rows of S, then of P
    rt_bf<16, TILE> p;
    rt_fl<16, D> o;
    typename rt_fl<16, TILE>::col_vec m, m_scaled, alpha, l;
    warp::neg_infty(m);
    warp::zero(l);
    warp::zero(o);
    warpgroup::load(q_s, g.q, {batch, head, q_tile, 0});    // rows past N read as 0

    for (int t = 0; t < tiles; t++) {
        warpgroup::load(k_s, g.k, {batch, head, t, 0});
        warpgroup::load(v_s, g.v, {batch, head, t, 0});
        __syncthreads();
        warpgroup::mm_ABt(s, q_s, k_s);                      // S = Q K^T, 64 x 64, on the tensor cores
        warpgroup::mma_async_wait();
        mask_tile<CAUSAL>(s, t * TILE, first_row, g.n);
        warp::mul(alpha, m, scale);
        warp::row_max(m, s, m);
        warp::mul(m_scaled, m, scale);
        warp::mul(s, s, scale);
        warp::sub_row(s, s, m_scaled);
        warp::exp2(s, s);
        warp::sub(alpha, alpha, m_scaled);
        warp::exp2(alpha, alpha);                            // 0 on the first tile (m was -inf)
        warp::mul(l, l, alpha);
        warp::row_sum(l, s, l);
        warp::mul_row(o, o, alpha);
        warp::copy(p, s);
        warpgroup::mma_AB(o, p, v_s);                        // O += P V: P from registers, V from shared memory
        warpgroup::mma_async_wait();
        __syncthreads();                                     // K and V are read: the next tile may overwrite them
    }
    warp::div_row(o, o, l);
    warpgroup::store(q_s, o);
    __syncthreads();
    warpgroup::store(g.o, q_s, {batch, head, q_tile, 0});   // checks rows: nothing past N is written
}

template <int D, bool CAUSAL>
static void launch_attention(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int H, int N) {
    using layout = typename attention_globals<D>::layout;
    // a gl is built on the host from a pointer and its run-time sizes (nullptr: d, fixed at compile time)
    attention_globals<D> g{layout{(bf16*)q, (size_t)B, (size_t)H, (size_t)N, nullptr},
                           layout{(bf16*)k, (size_t)B, (size_t)H, (size_t)N, nullptr},
                           layout{(bf16*)v, (size_t)B, (size_t)H, (size_t)N, nullptr},
                           layout{out, (size_t)B, (size_t)H, (size_t)N, nullptr}, N};
    const int shared = 5 * sizeof(typename attention_globals<D>::tile) + 1024;   // Q + 2 stages of K, V (step 3)
    cudaFuncSetAttribute(attention_kernel<D, CAUSAL>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    const dim3 grid((N + TILE - 1) / TILE, H, B);             // the last tile of queries may hang past N
    attention_kernel<D, CAUSAL><<<grid, THREADS, shared>>>(g);
}

// q, k, v, out: device pointers, [B, H, N, d] contiguous. d is 64 or 128 (others are refused: out is left
// unwritten); N is any length from 1 up; causal: query i sees keys 0..i.
extern "C" void tk_attention(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int H, int N, int d,
                             int causal) {
    if (B <= 0 || H <= 0 || N <= 0 || B > 65535 || H > 65535 || (d != 64 && d != 128)) return;
    if (d == 64 && causal) launch_attention<64, true>(q, k, v, out, B, H, N);
    if (d == 64 && !causal) launch_attention<64, false>(q, k, v, out, B, H, N);
    if (d == 128 && causal) launch_attention<128, true>(q, k, v, out, B, H, N);
    if (d == 128 && !causal) launch_attention<128, false>(q, k, v, out, B, H, N);
}
