// Ladder step 5 (the library's educational level 8): several consumer warpgroups and a wide tile of C.
// Adapted from HazyResearch/ThunderKittens kernels/gemm/educational_h100/level_08.cu (MIT licence), on the
// producer / consumer ring of step 4.
//
// A block now computes a 128 x 256 tile of C: two consumer warpgroups, each multiplying its own 64 rows of A
// by all 256 columns of B's slice (one 64x256 WGMMA: B's four 64x64 tiles sit side by side in shared memory,
// which is the layout of one st_bf<64, 256>). Per byte read from shared memory, 4x the math of step 4. Each
// consumer thread holds 128 float32 accumulators: setmaxnreg moves registers from the producer (40 a thread)
// to the consumers (232). C leaves through shared memory (reusing the ring, free once all math is done) and
// TMA stores. About 520 TFLOP/s at 4096^3 (the library's level 8 measured 517).
#include "kittens.cuh"
using namespace kittens;

constexpr int BLOCK = 64;
constexpr int M_BLOCK = 2;   // consumer warpgroups, 64 rows of C each
constexpr int N_BLOCK = 4;   // 64-column tiles of C a block
constexpr int STAGES = 4;
constexpr int CONSUMER_WARPS = M_BLOCK * WARPGROUP_WARPS;
constexpr int THREADS = (M_BLOCK + 1) * WARPGROUP_WARPS * WARP_THREADS;   // consumers 0 .. M_BLOCK-1, then the producer

struct globals {
    using tile = st_bf<BLOCK, BLOCK>;
    using layout = gl<bf16, 1, 1, -1, -1, tile>;
    layout A, B, C;
};
struct stage { globals::tile a[M_BLOCK], b[N_BLOCK]; };   // one 64-wide slice of K: 48 KB
using wide_tile = st_bf<BLOCK, BLOCK * N_BLOCK>;           // b[0..3] (or a C row of tiles) seen as one tile

__global__ __launch_bounds__(THREADS, 1) void gemm_kernel(const __grid_constant__ globals g) {
    extern __shared__ alignment_dummy smem[];
    shared_allocator allocator((int*)&smem[0]);
    stage (&ring)[STAGES] = allocator.allocate<stage, STAGES>();
    __shared__ semaphore full[STAGES], empty[STAGES];
    const int row = blockIdx.y * M_BLOCK, col = blockIdx.x * N_BLOCK;   // in 64x64 tiles
    const int k_tiles = g.A.cols() / BLOCK;
    const int consumer = warpgroup::groupid();   // 0 .. M_BLOCK-1: a consumer; M_BLOCK: the producer

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(full[s], 0, 1);
            init_semaphore(empty[s], CONSUMER_WARPS, 0);
        }
    }
    __syncthreads();

    if (consumer == M_BLOCK) {                               // the producer
        warpgroup::decrease_registers<40>();
        if (warpgroup::laneid() == 0) {
            for (int t = 0; t < k_tiles; t++) {
                const int s = t % STAGES, use = t / STAGES;
                if (use > 0) wait(empty[s], (use - 1) % 2);
                tma::expect_bytes(full[s], (M_BLOCK + N_BLOCK) * size_bytes<globals::tile>);
                for (int i = 0; i < M_BLOCK; i++) tma::load_async(ring[s].a[i], g.A, {0, 0, row + i, t}, full[s]);
                for (int i = 0; i < N_BLOCK; i++) tma::load_async(ring[s].b[i], g.B, {0, 0, t, col + i}, full[s]);
            }
        }
        return;
    }

    warpgroup::increase_registers<232>();                    // a consumer: 128 accumulators a thread
    rt_fl<16, BLOCK * N_BLOCK> c;                            // a warp's 16 x 256 of C
    warp::zero(c);
    for (int t = 0; t < k_tiles; t++) {
        const int s = t % STAGES;
        wait(full[s], (t / STAGES) % 2);
        warpgroup::mma_AB(c, ring[s].a[consumer], reinterpret_cast<wide_tile&>(ring[s].b));
        warpgroup::mma_async_wait();
        if (warp::laneid() == 0) arrive(empty[s]);
    }

    // registers -> shared (bf16) -> global by TMA. The ring is free once both consumers are done with it.
    group<CONSUMER_WARPS>::sync(1);
    globals::tile (&out)[N_BLOCK] = *reinterpret_cast<globals::tile (*)[N_BLOCK]>(&ring[consumer]);
    warpgroup::store(reinterpret_cast<wide_tile&>(out), c);
    warpgroup::sync(2 + consumer);
    if (warpgroup::laneid() == 0) {
        for (int i = 0; i < N_BLOCK; i++) tma::store_async(g.C, out[i], {0, 0, row + consumer, col + i});
        tma::store_async_read_wait();                         // shared memory stays valid until TMA has read it
    }
}

extern "C" void tk_gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0 || N % (N_BLOCK * BLOCK) || K % BLOCK) return;   // M may be ragged
    using layout = globals::layout;
    globals g{layout{(bf16*)A, nullptr, nullptr, (size_t)M, (size_t)K},
              layout{(bf16*)B, nullptr, nullptr, (size_t)K, (size_t)N},
              layout{C, nullptr, nullptr, (size_t)M, (size_t)N}};
    const int shared = STAGES * sizeof(stage) + 1024;
    cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    const int row_blocks = (M + M_BLOCK * BLOCK - 1) / (M_BLOCK * BLOCK);   // TMA zero-fills A's rows past M and
    gemm_kernel<<<dim3(N / (N_BLOCK * BLOCK), row_blocks), THREADS, shared>>>(g);   // drops C's on the way out
}
