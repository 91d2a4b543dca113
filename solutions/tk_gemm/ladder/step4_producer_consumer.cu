// Ladder step 4 (the library's educational level 7): work partitioning — a producer and a consumer warpgroup.
// Adapted from HazyResearch/ThunderKittens kernels/gemm/educational_h100/level_07.cu (MIT licence).
//
// Warp specialisation: warpgroup 0 only multiplies (the consumer), warpgroup 1 only loads (the producer;
// one thread of it issues the TMA copies). They meet at two barriers per stage of a 4-stage ring:
// `full[s]` completes when stage s's tiles have landed (the consumer waits on it), `empty[s]` when the
// consumer's 4 warps are done reading stage s (the producer waits on it before loading s again). No
// __syncthreads in the loop: the producer runs up to 4 slices ahead. About 200 TFLOP/s at 4096^3 (estimate):
// a 64 x 64 tile of C a block still reads 2 tiles from shared memory per 64x64x64 of math.
#include "kittens.cuh"
using namespace kittens;

constexpr int BLOCK = 64;
constexpr int STAGES = 4;
constexpr int CONSUMER_WARPS = WARPGROUP_WARPS;
constexpr int THREADS = 2 * WARPGROUP_WARPS * WARP_THREADS;   // consumer warpgroup 0, producer warpgroup 1

struct globals {
    using tile = st_bf<BLOCK, BLOCK>;
    using layout = gl<bf16, 1, 1, -1, -1, tile>;
    layout A, B, C;
};

__global__ __launch_bounds__(THREADS) void gemm_kernel(const __grid_constant__ globals g) {
    extern __shared__ alignment_dummy smem[];
    shared_allocator allocator((int*)&smem[0]);
    globals::tile (&As)[STAGES] = allocator.allocate<globals::tile, STAGES>();
    globals::tile (&Bs)[STAGES] = allocator.allocate<globals::tile, STAGES>();
    __shared__ semaphore full[STAGES], empty[STAGES];
    const int row = blockIdx.y, col = blockIdx.x;
    const int k_tiles = g.A.cols() / BLOCK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(full[s], 0, 1);                // completed by the producer's expect_bytes + the bytes
            init_semaphore(empty[s], CONSUMER_WARPS, 0);  // completed when each consumer warp has arrived
        }
    }
    __syncthreads();

    if (warpgroup::groupid() == 1) {                      // the producer
        if (warpgroup::laneid() == 0) {
            for (int t = 0; t < k_tiles; t++) {
                const int s = t % STAGES, use = t / STAGES;
                if (use > 0) wait(empty[s], (use - 1) % 2);   // the consumer is done with this stage's last use
                tma::expect_bytes(full[s], 2 * size_bytes<globals::tile>);
                tma::load_async(As[s], g.A, {0, 0, row, t}, full[s]);
                tma::load_async(Bs[s], g.B, {0, 0, t, col}, full[s]);
            }
        }
    } else {                                              // the consumer
        rt_fl<16, BLOCK> c;
        warp::zero(c);
        for (int t = 0; t < k_tiles; t++) {
            const int s = t % STAGES;
            wait(full[s], (t / STAGES) % 2);
            warpgroup::mma_AB(c, As[s], Bs[s]);
            warpgroup::mma_async_wait();
            if (warp::laneid() == 0) arrive(empty[s]);    // this warp no longer reads stage s
        }
        // every load has landed and been used: As[0] is free for C; the copy to global checks rows against M
        warpgroup::store(As[0], c);
        warpgroup::sync(1);
        warpgroup::store(g.C, As[0], {0, 0, row, col});
    }
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
