// out = softmax(x + y) along each row, bf16 in and out, float32 math: ThunderKittens tiles (the solution).
//
// Each warp owns 16-row tiles of the (rows x cols) matrices and walks them grid-stride; cols is 64 or 128,
// a whole row in one tile. Per tile: x and y go global -> shared with cp.async (load_async), shared ->
// registers as float32 tiles (rt_fl), then add, row max, subtract, exp, row sum, divide, all on registers;
// the result goes registers -> shared (rounded to bf16) -> global with 16-byte stores. Each warp keeps
// two stages of shared tiles, so the next tile's loads are in flight while this one is computed: the
// bytes in flight that a memory-bound kernel needs. The loads into shared check rows against `rows`
// (rows past the end read as 0 and are never stored), so rows need not be a multiple of 16.
#include "kittens.cuh"
using namespace kittens;

constexpr int WARPS = 4;          // warps per block, each working alone on its own tiles
constexpr int BLOCKS_PER_SM = 3;  // 12 warps an SM: ~96 KB of loads in flight at 128 columns
constexpr int TILE_ROWS = 16;     // a register tile's height

template <int COLS>
struct globals {
    using tile = st_bf<TILE_ROWS, COLS>;
    using layout = gl<bf16, 1, 1, -1, COLS>;   // batch 1, depth 1, rows at run time, COLS columns
    layout x, y, out;
    int tiles;                                 // ceil(rows / 16)
};

template <int COLS>
__global__ __launch_bounds__(WARPS * WARP_THREADS, BLOCKS_PER_SM)
void add_softmax_kernel(const __grid_constant__ globals<COLS> g) {
    using tile = typename globals<COLS>::tile;
    extern __shared__ alignment_dummy smem[];
    shared_allocator allocator((int*)&smem[0]);
    tile (&xs)[WARPS][2] = allocator.allocate<tile, WARPS, 2>();   // [warp][stage]
    tile (&ys)[WARPS][2] = allocator.allocate<tile, WARPS, 2>();

    const int w = warpid();
    const int stride = gridDim.x * WARPS;
    int t = blockIdx.x * WARPS + w;
    if (t >= g.tiles) return;   // warps work alone: no block-wide barrier below

    warp::load_async(xs[w][0], g.x, {0, 0, t, 0});
    warp::load_async(ys[w][0], g.y, {0, 0, t, 0});
    rt_fl<TILE_ROWS, COLS> a, b;
    typename rt_fl<TILE_ROWS, COLS>::col_vec row_max, row_sum;
    for (int stage = 0; t < g.tiles; t += stride, stage ^= 1) {
        const int next = t + stride;
        if (next < g.tiles) {   // start the next tile's loads before waiting for this one's
            warp::load_async(xs[w][stage ^ 1], g.x, {0, 0, next, 0});
            warp::load_async(ys[w][stage ^ 1], g.y, {0, 0, next, 0});
            load_async_wait<2>();   // all but the 2 groups just started: this tile's x and y are in
        } else {
            load_async_wait<0>();
        }
        warp::load(a, xs[w][stage]);
        warp::load(b, ys[w][stage]);
        warp::add(a, a, b);                 // in float32: x + y is never rounded to bf16
        warp::row_max(row_max, a);
        warp::sub_row(a, a, row_max);       // the largest is 0: exp never overflows
        warp::exp(a, a);
        warp::row_sum(row_sum, a);
        warp::div_row(a, a, row_sum);
        warp::store(xs[w][stage], a);       // rounded to bf16 once, into this stage's (now free) x tile
        __syncwarp();
        warp::store(g.out, xs[w][stage], {0, 0, t, 0});   // rows past `rows` are not written
        __syncwarp();                       // its reads are done before the next-but-one load reuses it
    }
}

static int sm_count() {
    static int count = 0;
    if (count == 0) {
        int device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    }
    return count;
}

template <int COLS>
static void launch(const bf16* x, const bf16* y, bf16* out, int rows) {
    using layout = typename globals<COLS>::layout;
    using tile = typename globals<COLS>::tile;
    const int tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    globals<COLS> g{layout{(bf16*)x, nullptr, nullptr, (size_t)rows, nullptr},
                    layout{(bf16*)y, nullptr, nullptr, (size_t)rows, nullptr},
                    layout{out, nullptr, nullptr, (size_t)rows, nullptr}, tiles};
    const int shared = 4 * WARPS * sizeof(tile) + 1024;   // 2 stages of x and y a warp, plus alignment room
    cudaFuncSetAttribute(add_softmax_kernel<COLS>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    int blocks = (tiles + WARPS - 1) / WARPS;
    blocks = blocks < sm_count() * BLOCKS_PER_SM ? blocks : sm_count() * BLOCKS_PER_SM;
    add_softmax_kernel<COLS><<<blocks, WARPS * WARP_THREADS, shared>>>(g);
}

// x, y, out: device pointers to rows x cols bf16 matrices, rows contiguous; cols is 64 or 128.
extern "C" void tk_add_softmax(const bf16* x, const bf16* y, bf16* out, int rows, int cols) {
    if (rows <= 0) return;
    if (cols == 64) launch<64>(x, y, out, rows);
    else if (cols == 128) launch<128>(x, y, out, rows);
}
