// C = A @ B with ThunderKittens on Hopper: bf16 A [M, K] and B [K, N], row-major, float32 accumulation,
// bf16 C [M, N]. N is a multiple of 256 and K of 64 (every graded size is); M is any size from 1 up.
//
// The launcher below is complete for ladder steps 1-3 (README.md): a block of one warpgroup (4 warps) computes
// a 64 x 64 tile of C, block (x, y) the tile at row y, column x, walking K in 64-wide slices. A gl describes
// each matrix in global memory; listing the tile type st_bf<64, 64> in it also makes a TMA descriptor for that
// tile on the host (used from step 3 on). Coordinates count in tiles: {0, 0, row tile, column tile}.
// Steps 4-6 change the launch too (threads, tile of C a block, a persistent grid): README.md says how.
#include "kittens.cuh"
using namespace kittens;

constexpr int BLOCK = 64;                                    // a block's tile of C is BLOCK x BLOCK
constexpr int THREADS = WARPGROUP_WARPS * WARP_THREADS;      // one warpgroup: 4 warps of 32 threads

struct globals {
    using tile = st_bf<BLOCK, BLOCK>;                        // a shared-memory tile, bf16
    using layout = gl<bf16, 1, 1, -1, -1, tile>;             // rows and columns known at run time
    layout A, B, C;
};

__global__ __launch_bounds__(THREADS) void gemm_kernel(const __grid_constant__ globals g) {
    extern __shared__ alignment_dummy smem[];                // dynamic shared memory, aligned for TMA and WGMMA
    shared_allocator allocator((int*)&smem[0]);
    globals::tile &As = allocator.allocate<globals::tile>();
    globals::tile &Bs = allocator.allocate<globals::tile>();
    const int row = blockIdx.y, col = blockIdx.x;            // this block's tile of C
    const int k_tiles = g.A.cols() / BLOCK;                  // 64-wide slices of K

    // TODO step 1 (tensor cores, warp MMA): accumulate in float32 registers, rt_fl<16, BLOCK> c (warp::zero it):
    //   each of the 4 warps owns 16 rows of the 64 x 64 tile of C. For each slice t of K:
    //     warpgroup::load(As, g.A, {0, 0, row, t}); warpgroup::load(Bs, g.B, {0, 0, t, col});   global -> shared
//       (these loads check rows against the matrix's: A's rows past M read as 0)
    //     __syncthreads();
    //     warpgroup::load(a, As)      (rt_bf<16, BLOCK> a: this warp's 16 rows of A's tile)
    //     warp::load(b, Bs)           (rt_bf<BLOCK, BLOCK, ducks::rt_layout::col> b: all of B's, column layout)
    //     __syncthreads();            (nobody overwrites As, Bs while a warp still reads them)
    //     warp::mma_AB(c, a, b, c);   (c += a @ b)
    //   C goes out through shared memory (As is free after the loop): warpgroup::store(As, c) (rounded to bf16
//   once), __syncthreads(), warpgroup::store(g.C, As, {0, 0, row, col}), which writes no row past M. (A store
//   straight from registers, warpgroup::store(g.C, c, ...), checks no bounds: the last row of tiles would
//   write past the end of C.)
    // TODO step 2 (WGMMA): drop the register copies of A and B: warpgroup::mma_AB(c, As, Bs) multiplies the
    //   shared tiles as one warpgroup, asynchronously; warpgroup::mma_async_wait() before the tiles are reused.
    // TODO step 3 (TMA, double buffering): two stages of tiles, an mbarrier each (__shared__ semaphore full[2];
    //   init_semaphore(full[s], 0, 1) by one thread, then __syncthreads). One thread loads slice t + 1 into the
    //   other stage (tma::expect_bytes(full[s], bytes); tma::load_async(As[s], g.A, {0, 0, row, t + 1}, full[s]))
    //   while the warpgroup multiplies slice t after wait(full[s], phase): the n-th use of a stage waits for
    //   phase n % 2.
    (void)As; (void)Bs; (void)row; (void)col; (void)k_tiles;
}

// A, B, C: device pointers, row-major and contiguous (no strides). Sizes this kernel cannot tile are refused:
// C is left unwritten.
extern "C" void tk_gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0 || N % BLOCK || K % BLOCK) return;   // M may be ragged
    using layout = globals::layout;
    // a gl is built on the host from a pointer and its run-time sizes (nullptr: the fixed batch and depth of 1)
    globals g{layout{(bf16*)A, nullptr, nullptr, (size_t)M, (size_t)K},
              layout{(bf16*)B, nullptr, nullptr, (size_t)K, (size_t)N},
              layout{C, nullptr, nullptr, (size_t)M, (size_t)N}};
    const int shared = 2 * sizeof(globals::tile) + 1024;     // step 3: 2 stages of A and B; + room to align
    cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    gemm_kernel<<<dim3(N / BLOCK, (M + BLOCK - 1) / BLOCK), THREADS, shared>>>(g);   // the last row of tiles may
                                                                                       // hang past M
}
