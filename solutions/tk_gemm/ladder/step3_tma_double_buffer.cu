// Ladder step 3 (the library's educational level 6): TMA copies and double buffering.
// Adapted from HazyResearch/ThunderKittens kernels/gemm/educational_h100/level_06.cu (MIT licence).
//
// One thread asks the tensor memory accelerator (TMA) for whole 64x64 tiles (tma::load_async, with the
// descriptors the host made in the gl): no thread spends instructions on addresses. Two stages of shared
// tiles: while the warpgroup multiplies slice t from one stage, TMA fills the other with slice t + 1. Each
// stage has an mbarrier (TK's semaphore) that completes when its bytes have landed; its phase flips every
// use, so the wait for the n-th use of a stage asks for phase n % 2. About 150 TFLOP/s at 4096^3 (estimate).
#include "kittens.cuh"
using namespace kittens;

constexpr int BLOCK = 64;
constexpr int STAGES = 2;
constexpr int THREADS = WARPGROUP_WARPS * WARP_THREADS;

struct globals {
    using tile = st_bf<BLOCK, BLOCK>;
    using layout = gl<bf16, 1, 1, -1, -1, tile>;
    layout A, B, C;
};

__device__ static inline void load_slice(globals::tile &As, globals::tile &Bs, const globals &g, int row, int col,
                                         int t, semaphore &full) {
    tma::expect_bytes(full, 2 * size_bytes<globals::tile>);   // the barrier completes when these bytes land
    tma::load_async(As, g.A, {0, 0, row, t}, full);
    tma::load_async(Bs, g.B, {0, 0, t, col}, full);
}

__global__ __launch_bounds__(THREADS) void gemm_kernel(const __grid_constant__ globals g) {
    extern __shared__ alignment_dummy smem[];
    shared_allocator allocator((int*)&smem[0]);
    globals::tile (&As)[STAGES] = allocator.allocate<globals::tile, STAGES>();
    globals::tile (&Bs)[STAGES] = allocator.allocate<globals::tile, STAGES>();
    __shared__ semaphore full[STAGES];
    const int row = blockIdx.y, col = blockIdx.x;
    const int k_tiles = g.A.cols() / BLOCK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) init_semaphore(full[s], 0, 1);   // one arrival: the expect_bytes
        load_slice(As[0], Bs[0], g, row, col, 0, full[0]);
    }
    __syncthreads();   // the barriers are initialised before anyone waits on them

    rt_fl<16, BLOCK> c;
    warp::zero(c);
    for (int t = 0; t < k_tiles; t++) {
        const int s = t % STAGES;
        if (threadIdx.x == 0 && t + 1 < k_tiles)   // the other stage was freed by the barrier that ended t - 1
            load_slice(As[s ^ 1], Bs[s ^ 1], g, row, col, t + 1, full[s ^ 1]);
        wait(full[s], (t / STAGES) % 2);           // slice t has landed
        warpgroup::mma_AB(c, As[s], Bs[s]);
        warpgroup::mma_async_wait();
        __syncthreads();                           // every warp is done with stage s before it is loaded again
    }
    // every load has landed and been used: As[0] is free for C (TMA zero-filled A's rows past M)
    warpgroup::store(As[0], c);
    __syncthreads();
    warpgroup::store(g.C, As[0], {0, 0, row, col});
}

extern "C" void tk_gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0 || N % BLOCK || K % BLOCK) return;   // M may be ragged
    using layout = globals::layout;
    globals g{layout{(bf16*)A, nullptr, nullptr, (size_t)M, (size_t)K},
              layout{(bf16*)B, nullptr, nullptr, (size_t)K, (size_t)N},
              layout{C, nullptr, nullptr, (size_t)M, (size_t)N}};
    const int shared = 2 * STAGES * sizeof(globals::tile) + 1024;
    cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    gemm_kernel<<<dim3(N / BLOCK, (M + BLOCK - 1) / BLOCK), THREADS, shared>>>(g);   // the last row of tiles may hang past M
}
