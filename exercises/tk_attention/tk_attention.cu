// out = softmax(q k^T / sqrt(d)) v with ThunderKittens on Hopper: bf16 q, k, v, out [B, H, N, d], contiguous;
// d = 64 or 128; causal or not (causal: query i sees keys 0..i); N any length from 1 up. Scores, the running
// max and sum and the output accumulator in float32; nothing N x N in memory, ever.
//
// The launcher below is complete for ladder steps 1-3 (README.md): a block of one warpgroup (4 warps) takes
// the 64 query rows of tile blockIdx.x of one (batch, head) = (blockIdx.z, blockIdx.y); warp w owns rows
// 16w .. 16w + 15 of it. K and V are walked in tiles of 64 keys. A gl describes each [B, H, N, d] tensor;
// listing the tile type in it also makes a TMA descriptor for that tile on the host (step 3 on).
// Coordinates count in tiles: {batch, head, tile of rows, 0}. Steps 4-5 change the launch too: README.md.
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

template <int D, bool CAUSAL>
__global__ __launch_bounds__(THREADS) void attention_kernel(const __grid_constant__ attention_globals<D> g) {
    using tile = typename attention_globals<D>::tile;
    extern __shared__ alignment_dummy smem[];                // dynamic shared memory, aligned for TMA and WGMMA
    shared_allocator allocator((int*)&smem[0]);
    tile &q_s = allocator.allocate<tile>();
    tile &k_s = allocator.allocate<tile>();
    tile &v_s = allocator.allocate<tile>();
    const int batch = blockIdx.z, head = blockIdx.y, q_tile = blockIdx.x;
    const int first_row = q_tile * TILE + warpgroup::warpid() * 16;   // this warp's first query row

    // TODO step 1 (register tiles, warp MMA, a plain loop):
    //   Q: warpgroup::load(q_s, g.q, {batch, head, q_tile, 0}) (global -> shared; rows past N read as 0), then
    //   __syncthreads() and warpgroup::load(q, q_s): rt_bf<16, D> q, this warp's 16 rows, kept in registers.
    //   Per warp, in float32 registers: rt_fl<16, D> o = 0, and per row (rt_fl<16, TILE>::col_vec) the running
    //   max m = -inf (warp::neg_infty) and sum l = 0.
    //   For each tile t of 64 keys (causal: stop after the tile holding the block's last real query):
    //     __syncthreads(); warpgroup::load(k_s, g.k, {batch, head, t, 0}); the same for V; __syncthreads()
    //     warp::load(k, k_s) (rt_bf<TILE, D>: all 64 keys); rt_fl<16, TILE> s = 0; warp::mma_ABt(s, q, k, s)
    //     mask: keys past N (they read as 0, which is a score of 0, not -inf) and, causal, keys after the
    //       query: -inf. warp::apply(s, s, [=] __device__ (int row, int col, float x) { ... }) gives each
    //       element with its row (0-15 in this warp's rows) and column (0-63 in the tile).
    //     online softmax: m_new = max(m, row max of s) (warp::row_max(m, s, m)); alpha = exp(m_old - m_new);
    //       p = exp(s - m_new) (warp::sub_row, warp::exp); l = l * alpha + row sum of p; o = o * alpha
    //       (warp::mul_row); the scale 1/sqrt(d) goes on s before all this.
    //     o += p v: rt_bf<16, TILE> p (warp::copy from float), rt_bf<TILE, D, ducks::rt_layout::col> v
    //       (warp::load(v, v_s)), warp::mma_AB(o, p, v, o). (At d = 128, load v after s is done: k's 128
    //       registers are free by then.)
    //   out = o / l (warp::div_row), through shared memory: __syncthreads(); warpgroup::store(q_s, o);
    //   __syncthreads(); warpgroup::store(g.o, q_s, {batch, head, q_tile, 0}), which writes no row past N.
    //   (warp::store(g.o, o, ...) from registers checks no bounds: the last tile would write past the end.)
    // TODO step 2 (WGMMA): rt_fl<16, TILE> s; warpgroup::mm_ABt(s, q_s, k_s) multiplies the shared tiles
    //   as one warpgroup; warpgroup::mma_AB(o, p, v_s) takes p from registers and V from shared memory;
    //   warpgroup::mma_async_wait() after each, and a __syncthreads() before K and V are overwritten.
    // TODO step 3 (TMA, double buffering): two stages of K and V, an mbarrier each (__shared__ semaphore;
    //   init_semaphore(sem, 0, 1) by one thread, then __syncthreads). One thread loads tile t + 1 into the
    //   other stage (tma::expect_bytes, tma::load_async(k_stage, g.k, {batch, head, t + 1, 0}, sem)) while
    //   the warpgroup computes tile t after wait(sem, phase): the n-th use of a stage waits for phase n % 2.
    (void)q_s; (void)k_s; (void)v_s; (void)batch; (void)head; (void)first_row;
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
