// out = softmax(x + y) along each row, bf16 in and out: your first ThunderKittens kernel.
//
// ThunderKittens (TK) thinks in tiles, not threads: a warp holds a 16 x COLS tile in registers (rt_fl: float,
// rt_bf: bf16), a block shares tiles in shared memory (st_bf), and a global layout (gl) describes a tensor in
// global memory. Copies go global -> shared -> registers and back; the math is whole-tile operations.
// Read README.md for the ladder from a correct kernel to a fast one.
#include "kittens.cuh"
using namespace kittens;

constexpr int WARPS = 4;       // warps per block; each warp handles its own 16-row tile(s)
constexpr int TILE_ROWS = 16;  // a register tile's height

template <int COLS>
struct globals {
    using tile = st_bf<TILE_ROWS, COLS>;          // a shared-memory tile: 16 rows of one whole row each
    using layout = gl<bf16, 1, 1, -1, COLS>;      // batch 1, depth 1, rows known at run time, COLS columns
    layout x, y, out;
    int tiles;                                    // ceil(rows / 16): the last tile may hang past the end
};

template <int COLS>
__global__ __launch_bounds__(WARPS * WARP_THREADS)
void add_softmax_kernel(const __grid_constant__ globals<COLS> g) {
    using tile = typename globals<COLS>::tile;
    __shared__ tile xs[WARPS], ys[WARPS];         // one x and one y tile per warp
    const int w = warpid();                       // this warp's number in the block
    const int t = blockIdx.x * WARPS + w;         // the 16-row tile this warp owns
    if (t >= g.tiles) return;

    // TODO 1: global -> shared: warp::load(xs[w], g.x, {0, 0, t, 0}) (a coordinate counts in tiles: batch,
    //         depth, row tile, column tile), the same for y; then __syncwarp(). These loads check rows
    //         against the tensor's: rows past the end read as 0, so the last tile may be partial.
    // TODO 2: shared -> registers as float32 tiles: rt_fl<TILE_ROWS, COLS> a, b; warp::load(a, xs[w]); ...
    //         Add in float32 (warp::add): x + y rounded to bf16 loses the digits a large row needs.
    // TODO 3: the row softmax on registers, with a column vector per row (typename rt_fl<16, COLS>::col_vec):
    //         warp::row_max, warp::sub_row (the largest becomes 0: exp cannot overflow), warp::exp,
    //         warp::row_sum, warp::div_row.
    // TODO 4: registers -> shared -> global: warp::store(xs[w], a) (rounds to bf16), __syncwarp(),
    //         warp::store(g.out, xs[w], {0, 0, t, 0}) (rows past the end are not written).
}

template <int COLS>
static void launch(const bf16* x, const bf16* y, bf16* out, int rows) {
    using layout = typename globals<COLS>::layout;
    const int tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    // a gl is built on the host from a pointer and the sizes of its run-time dimensions (nullptr: fixed ones)
    globals<COLS> g{layout{(bf16*)x, nullptr, nullptr, (size_t)rows, nullptr},
                    layout{(bf16*)y, nullptr, nullptr, (size_t)rows, nullptr},
                    layout{out, nullptr, nullptr, (size_t)rows, nullptr}, tiles};
    const int blocks = (tiles + WARPS - 1) / WARPS;
    add_softmax_kernel<COLS><<<blocks, WARPS * WARP_THREADS>>>(g);
}

// x, y, out: device pointers to rows x cols bf16 matrices, rows contiguous; cols is 64 or 128.
extern "C" void tk_add_softmax(const bf16* x, const bf16* y, bf16* out, int rows, int cols) {
    if (rows <= 0) return;
    if (cols == 64) launch<64>(x, y, out, rows);
    else if (cols == 128) launch<128>(x, y, out, rows);
}
