// Ladder step 1 (the library's educational level 4): tensor cores through warp-level MMA (mma.sync, "WMMA").
// Adapted from HazyResearch/ThunderKittens kernels/gemm/educational_h100/level_04.cu (MIT licence).
//
// A block of 4 warps computes a 64 x 64 tile of C. Per 64-wide slice of K the block copies A's and B's 64x64
// tiles global -> shared (all 128 threads), then each warp loads its 16 rows of A and all of B into registers
// and multiplies them on the tensor cores, accumulating in float32 registers. No overlap: the copies and the
// math take turns, separated by __syncthreads. About 11 TFLOP/s at 4096^3 on an H100 (the library's level 4).
#include "kittens.cuh"
using namespace kittens;

constexpr int BLOCK = 64;
constexpr int THREADS = WARPGROUP_WARPS * WARP_THREADS;   // one warpgroup: 4 warps, 16 rows of C each

struct globals {
    using tile = st_bf<BLOCK, BLOCK>;
    using layout = gl<bf16, 1, 1, -1, -1, tile>;
    layout A, B, C;
};

__global__ __launch_bounds__(THREADS) void gemm_kernel(const __grid_constant__ globals g) {
    extern __shared__ alignment_dummy smem[];
    shared_allocator allocator((int*)&smem[0]);
    globals::tile &As = allocator.allocate<globals::tile>();
    globals::tile &Bs = allocator.allocate<globals::tile>();
    const int row = blockIdx.y, col = blockIdx.x;
    const int k_tiles = g.A.cols() / BLOCK;

    rt_bf<16, BLOCK> a;                              // this warp's 16 rows of A's tile
    rt_bf<BLOCK, BLOCK, ducks::rt_layout::col> b;    // all of B's tile, in the column layout mma_AB wants
    rt_fl<16, BLOCK> c;                              // this warp's 16 x 64 of C, float32
    warp::zero(c);
    for (int t = 0; t < k_tiles; t++) {
        warpgroup::load(As, g.A, {0, 0, row, t});    // the 4 warps copy the tiles; rows past M read as 0
        warpgroup::load(Bs, g.B, {0, 0, t, col});
        __syncthreads();
        warpgroup::load(a, As);                      // warp w: rows 16w .. 16w+15
        warp::load(b, Bs);
        __syncthreads();                             // everyone has read As, Bs: the next copy may overwrite them
        warp::mma_AB(c, a, b, c);                    // c += a @ b on the tensor cores
    }
    // C leaves through shared memory (As is free now), rounded to bf16 once: the copy to global checks rows
    // against M (rows past the end are not written), which a store straight from registers would not
    warpgroup::store(As, c);
    __syncthreads();
    warpgroup::store(g.C, As, {0, 0, row, col});
}

extern "C" void tk_gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0 || N % BLOCK || K % BLOCK) return;   // M may be ragged
    using layout = globals::layout;
    globals g{layout{(bf16*)A, nullptr, nullptr, (size_t)M, (size_t)K},
              layout{(bf16*)B, nullptr, nullptr, (size_t)K, (size_t)N},
              layout{C, nullptr, nullptr, (size_t)M, (size_t)N}};
    const int shared = 2 * sizeof(globals::tile) + 1024;   // + room to align the tiles to 1024 bytes
    cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    gemm_kernel<<<dim3(N / BLOCK, (M + BLOCK - 1) / BLOCK), THREADS, shared>>>(g);   // the last row of tiles may hang past M
}
