// Ladder step 2 (the library's educational level 5): Hopper's warpgroup MMA (WGMMA) straight from shared memory.
// Adapted from HazyResearch/ThunderKittens kernels/gemm/educational_h100/level_05.cu (MIT licence).
//
// Step 1 with one change: the 4 warps multiply as one warpgroup, reading A's and B's tiles from shared memory
// themselves (wgmma.mma_async), so nothing is loaded into registers but the accumulator. Still no overlap of
// copies and math. About 90 TFLOP/s at 4096^3 on an H100 (the library's level 5).
#include "kittens.cuh"
using namespace kittens;

constexpr int BLOCK = 64;
constexpr int THREADS = WARPGROUP_WARPS * WARP_THREADS;

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

    rt_fl<16, BLOCK> c;                              // a warp's 16 rows of the warpgroup's 64 x 64 accumulator
    warp::zero(c);
    for (int t = 0; t < k_tiles; t++) {
        warpgroup::load(As, g.A, {0, 0, row, t});
        warpgroup::load(Bs, g.B, {0, 0, t, col});
        __syncthreads();
        warpgroup::mma_AB(c, As, Bs);                // c += As @ Bs, issued asynchronously by the warpgroup
        warpgroup::mma_async_wait();                 // done reading As, Bs ...
        __syncthreads();                             // ... in every warp, before the next copy overwrites them
    }
    // C leaves through shared memory (As is free now): the copy to global checks rows against M
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
    const int shared = 2 * sizeof(globals::tile) + 1024;
    cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    gemm_kernel<<<dim3(N / BLOCK, (M + BLOCK - 1) / BLOCK), THREADS, shared>>>(g);   // the last row of tiles may hang past M
}
