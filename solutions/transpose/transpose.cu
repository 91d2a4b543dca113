// Solution — out = x transposed (x: rows x cols, out: cols x rows), near the memory's bandwidth.
//
// Reading x by rows and writing out by rows cannot both be done straight from global memory: a row of
// out is a column of x. So each block stages a tile of x in shared memory: it reads the tile by rows of
// x (coalesced), waits for the whole tile, and writes it by rows of out (coalesced), reading the tile
// down its columns. The tile's rows are padded by one float (PITCH = TILE + 1) so that a column of the
// tile falls in 32 different banks, not one.
//
// Two kernels:
//   * transpose_vec4 (rows, cols, both strides multiples of 4, 16-byte aligned): 64 x 64 tiles, every
//     global access a float4 (16 bytes), each thread moving 4 of them in and 4 out. A warp reads 4 rows x
//     8 float4 (4 full 128-byte lines) and writes likewise. Shared memory is accessed one float at a time
//     in a pattern where the 32 lanes of a warp always hit 32 different banks (see the comments below).
//   * transpose_tile32 (any other size or stride): the classic 32 x 32 tile, 32 x 8 threads, 4 elements
//     per thread, PITCH 33.
// Both loop over tile rows so that gridDim.y stays under its limit (65535) for any number of rows.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int MAX_GRID_Y = 65535;

// --- 64 x 64 tiles, float4 global accesses ------------------------------------------------------------
constexpr int VT = 64, VPITCH = VT + 1;  // PITCH = 65 = 1 (mod 32): the next row starts one bank further
constexpr int VTHREADS = 256;            // 8 warps; 64 rows x 16 float4 per tile = 4 float4 per thread

__global__ void __launch_bounds__(VTHREADS)
transpose_vec4(const float* __restrict__ x, float* __restrict__ out, int rows, int cols, long long sx, long long so) {
    __shared__ float tile[VT][VPITCH];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    // A warp covers 4 rows x 8 float4 groups (32 floats): lane -> (quad = lane / 8, group = lane % 8).
    const int quad = lane / 8, group = lane % 8;
    const int col0 = blockIdx.x * VT;
    const int tiles_y = (rows + VT - 1) / VT;
    for (int tile_y = blockIdx.y; tile_y < tiles_y; tile_y += gridDim.y) {
        const int row0 = tile_y * VT;
        float4 v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // 4 loads in flight per thread
            const int pair = warp + 8 * i;                 // 0..31: (4-row band, half of the 64 columns)
            const int r = (pair / 2) * 4 + quad, c = (pair % 2) * 32 + group * 4;
            if (row0 + r < rows && col0 + c < cols)       // cols % 4 == 0: the group is whole or absent
                v[i] = *reinterpret_cast<const float4*>(x + (row0 + r) * sx + col0 + c);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int pair = warp + 8 * i;
            const int r = (pair / 2) * 4 + quad, c = (pair % 2) * 32 + group * 4;
            // bank = (r * 65 + c + k) % 32 = (r + 4 * group + k) % 32 (+ const): 32 lanes, 32 banks
            tile[r][c] = v[i].x;
            tile[r][c + 1] = v[i].y;
            tile[r][c + 2] = v[i].z;
            tile[r][c + 3] = v[i].w;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            // out row (x column) c, out columns (x rows) 4g .. 4g + 3, as one float4
            const int pair = warp + 8 * i;
            const int c = (pair / 2) * 4 + quad, g = (pair % 2) * 8 + group;
            // bank = ((4g + k) * 65 + c) % 32 = (4 * group + k + c) % 32 (+ const): 32 lanes, 32 banks
            const float4 w = make_float4(tile[4 * g][c], tile[4 * g + 1][c], tile[4 * g + 2][c], tile[4 * g + 3][c]);
            if (col0 + c < cols && row0 + 4 * g < rows)    // rows % 4 == 0: whole or absent
                *reinterpret_cast<float4*>(out + (col0 + c) * so + row0 + 4 * g) = w;
        }
        __syncthreads();  // the tile is read by all before the next round overwrites it
    }
}

// --- 32 x 32 tiles, one float at a time: any size and stride ----------------------------------------------
constexpr int ST = 32, SPITCH = ST + 1, SROWS = 8;  // 32 x 8 threads, 4 elements each

__global__ void __launch_bounds__(ST * SROWS)
transpose_tile32(const float* __restrict__ x, float* __restrict__ out, int rows, int cols, long long sx, long long so) {
    __shared__ float tile[ST][SPITCH];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col0 = blockIdx.x * ST;
    const int tiles_y = (rows + ST - 1) / ST;
    for (int tile_y = blockIdx.y; tile_y < tiles_y; tile_y += gridDim.y) {
        const int row0 = tile_y * ST;
#pragma unroll
        for (int j = 0; j < ST; j += SROWS) {  // read rows of x: a warp reads 32 neighbouring floats
            const long long r = row0 + ty + j;
            if (r < rows && col0 + tx < cols) tile[ty + j][tx] = x[r * sx + col0 + tx];
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < ST; j += SROWS) {  // write rows of out: a warp writes 32 neighbouring floats
            const long long c = col0 + ty + j;   // out row = x column
            if (c < cols && row0 + tx < rows) out[c * so + row0 + tx] = tile[tx][ty + j];  // down a tile column
        }
        __syncthreads();
    }
}

static bool rows_aligned16(const void* p, int stride) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride % 4 == 0;
}

static unsigned grid_y(int rows, int tile) {
    const int tiles = (rows + tile - 1) / tile;
    return (unsigned)(tiles < MAX_GRID_Y ? tiles : MAX_GRID_Y);
}

extern "C" void transpose(const float* x, float* out, int rows, int cols, int x_stride, int out_stride) {
    if (rows <= 0 || cols <= 0) return;
    if (rows % 4 == 0 && cols % 4 == 0 && rows_aligned16(x, x_stride) && rows_aligned16(out, out_stride)) {
        const dim3 blocks((cols + VT - 1) / VT, grid_y(rows, VT));
        transpose_vec4<<<blocks, VTHREADS>>>(x, out, rows, cols, x_stride, out_stride);
    } else {
        const dim3 blocks((cols + ST - 1) / ST, grid_y(rows, ST));
        transpose_tile32<<<blocks, dim3(ST, SROWS)>>>(x, out, rows, cols, x_stride, out_stride);
    }
}
