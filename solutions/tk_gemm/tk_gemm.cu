// C = A @ B: bf16 A [M, K] and B [K, N] row-major, float32 accumulation, bf16 C [M, N] (the solution).
// Adapted from ThunderKittens' own H100 GEMM, HazyResearch/ThunderKittens kernels/gemm/bf16_h100 (MIT licence).
//
// The ladder's last rung: everything levels 4-8 of the library's educational GEMM added, plus what its README
// lists "for peak performance": a deeper pipeline, a persistent kernel and an L2-friendly order of tiles.
// - A block computes a 128 x 256 tile of C: two consumer warpgroups, each with a 64 x 256 float32
//   accumulator in registers (rt_fl<16, 256> a warp), fed by WGMMA straight from shared memory.
// - One producer warpgroup (one thread of it, in fact) streams 64-wide K slices of A (two 64x64 tiles) and
//   B (four) with TMA into a ring of 4 stages; mbarriers (TK's semaphores) say "stage full" / "stage free",
//   so loads run 3 stages ahead of the tensor cores and nobody waits on a __syncthreads.
// - Persistent: one block per SM walks tile after tile (prototype::lcf's task loop); while the consumers
//   store one tile's C (registers -> shared -> TMA store), the producer is already loading the next tile's
//   first stages into the part of shared memory the store does not use.
// - Tiles are visited in groups of SUPER_M block-rows (column by column within a group): the 132 blocks in
//   flight share few A rows and B columns, so most of their loads hit L2 rather than HBM.
// - setmaxnreg: the producer gives registers back (40 a thread), the consumers take them (232): the
//   accumulators are 128 floats a thread.
// TK's prototype::lcf ("load, compute, finish") template runs the loop, the ring and its barriers; this file
// says what one task is (common_setup), what a load is (producer::load) and what compute and finish are.
#include "kittens.cuh"
#include "prototype.cuh"
using namespace kittens;
using namespace kittens::prototype;
using namespace kittens::prototype::lcf;

constexpr int M_BLOCK = 2;   // consumer warpgroups: 64-row tiles of C a block
constexpr int N_BLOCK = 4;   // 64-column tiles of C a block: a block's C tile is 128 x 256
constexpr int SUPER_M = 8;   // block-rows visited together, for L2 reuse of B's columns

struct gemm_layout {
    using base_tile = st_bf<64, 64>;
    using global_layout = gl<bf16, 1, 1, -1, -1, base_tile>;   // TMA descriptors for 64x64 tiles, made on the host
    struct globals { global_layout A, B, C; };
    struct input_block { base_tile a[M_BLOCK], b[N_BLOCK]; };  // one pipeline stage: a 64-wide slice of K
    struct finish_block { base_tile c[M_BLOCK][N_BLOCK]; };    // C on its way out
    struct common_state { int2 coord; };                       // this task's tile, in 64x64 units
    struct consumer_state { rt_fl<16, N_BLOCK * 64> accum; };  // a warp's 16 x 256 share of the accumulator
};

struct gemm {
    using layout = gemm_layout;
    using wide_tile = st_bf<64, 64 * N_BLOCK>;   // B's four 64x64 tiles side by side, as WGMMA reads them
    static constexpr int NUM_CONSUMER_WARPS = M_BLOCK * 4, INPUT_PIPE_STAGES = 4, PRODUCER_BARRIER_ARRIVALS = 1;

    // Which 128 x 256 tile of C task number task_iter * gridDim.x + blockIdx.x is; num_iters = -1: no more work.
    __device__ static inline void common_setup(common_setup_args<layout> args) {
        const int row_blocks = (args.globals.C.rows() + M_BLOCK * 64 - 1) / (M_BLOCK * 64);   // the last may hang past M
        const int col_blocks = args.globals.C.cols() / (N_BLOCK * 64);
        const int super_rows = (row_blocks / SUPER_M) * SUPER_M, final_rows = row_blocks - super_rows;
        const int super_repeat = SUPER_M * col_blocks;
        const int task = args.task_iter * gridDim.x + blockIdx.x;
        if (task < super_rows * col_blocks) {          // inside a group of SUPER_M block-rows: down, then across
            args.common.coord = {SUPER_M * (task / super_repeat) + task % SUPER_M, (task % super_repeat) / SUPER_M};
        } else if (task < row_blocks * col_blocks) {   // the last, shorter group
            const int rest = task - super_rows * col_blocks;
            args.common.coord = {super_rows + rest % final_rows, rest / final_rows};
        } else {
            args.num_iters = -1;
            return;
        }
        args.num_iters = args.globals.A.cols() / 64;   // K slices
        const int id = warpgroup::groupid() == NUM_CONSUMER_WARPS / 4 ? 0 : warpgroup::groupid();  // producer: 0
        args.common.coord = {args.common.coord.x * M_BLOCK + id, args.common.coord.y * N_BLOCK};
    }

    struct producer {
        __device__ static void setup(producer_setup_args<layout> args) {
            warpgroup::decrease_registers<40>();   // loads need few registers: give them to the consumers
        }
        __device__ static void load(producer_load_args<layout> args) {
            if (warpgroup::laneid() == 0) {        // one thread issues every TMA copy of the stage
                tma::expect(args.inputs_arrived, args.input);   // the barrier completes when all its bytes land
                for (int i = 0; i < M_BLOCK; i++)
                    tma::load_async(args.input.a[i], args.globals.A, {args.common.coord.x + i, args.iter}, args.inputs_arrived);
                for (int i = 0; i < N_BLOCK; i++)
                    tma::load_async(args.input.b[i], args.globals.B, {args.iter, args.common.coord.y + i}, args.inputs_arrived);
            }
        }
    };

    struct consumer {
        __device__ static void setup(consumer_setup_args<layout> args) {
            warpgroup::increase_registers<232>();
            warp::zero(args.state.accum);
        }
        __device__ static void compute(consumer_compute_args<layout> args) {
            // 64 x 64 (this warpgroup's A) times 64 x 256 (all of B's slice), accumulated in float32 registers
            warpgroup::mma_AB(args.state.accum, args.input.a[warpgroup::groupid()],
                              reinterpret_cast<wide_tile&>(args.input.b));
            warpgroup::mma_async_wait();
            if (warp::laneid() == 0) arrive(args.inputs_finished);   // this stage may be loaded again
        }
        __device__ static void finish(consumer_finish_args<layout> args) {
            // float32 registers -> bf16 in shared (rounded once) -> global by TMA
            warpgroup::store(reinterpret_cast<wide_tile&>(args.finish.c[warpgroup::groupid()]), args.state.accum);
            warpgroup::sync(warpgroup::groupid() + 4);
            if (warpgroup::laneid() == 0) {
                for (int i = 0; i < N_BLOCK; i++) {
                    tma::store_async(args.globals.C, args.finish.c[warpgroup::groupid()][i],
                                     {args.common.coord.x, args.common.coord.y + i});
                    tma::store_async_read_wait();   // the finish block is read before anyone reuses it
                }
            }
            warp::zero(args.state.accum);           // ready for the next task
            if (warp::laneid() == 0) arrive(args.finish_finished);
        }
    };
};

static int sm_count() {
    static int count = 0;
    if (count == 0) {
        int device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    }
    return count;
}

// A, B, C: device pointers, row-major and contiguous. M is any size: TMA reads A's rows past M as zeros and
// drops C's rows past M. N a multiple of 256 and K of 64 (other sizes are not supported: C is left unwritten).
extern "C" void tk_gemm(const bf16* A, const bf16* B, bf16* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0 || N % (N_BLOCK * 64) || K % 64) return;
    using global_layout = gemm_layout::global_layout;
    gemm_layout::globals g{global_layout{(bf16*)A, nullptr, nullptr, (size_t)M, (size_t)K},
                           global_layout{(bf16*)B, nullptr, nullptr, (size_t)K, (size_t)N},
                           global_layout{C, nullptr, nullptr, (size_t)M, (size_t)N}};
    constexpr int shared = MAX_SHARED_MEMORY - 1024;   // 4 stages of 48 KB, the finish block overlapping the last
    cudaFuncSetAttribute(kernel<gemm>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    const int tiles = ((M + M_BLOCK * 64 - 1) / (M_BLOCK * 64)) * (N / (N_BLOCK * 64));
    const int blocks = tiles < sm_count() ? tiles : sm_count();   // persistent: at most one block an SM
    kernel<gemm><<<blocks, prototype::detail::NUM_THREADS_v<gemm>, shared>>>(g);
}
