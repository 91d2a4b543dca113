// Solution — inclusive prefix sum of int32 in one pass: decoupled look-back (Merrill & Garland, CUB's
// design).
//
// Each block takes the next tile of 4096 values (a global counter hands tiles out in order, so every
// tile's predecessors are already running), scans it in registers (16 values a thread, then warp
// shuffles, then the 8 warp totals), and publishes the tile's total (its "aggregate") at once. Warp 0
// then looks back over the predecessors' status words, 32 at a time, adding aggregates until it meets
// one that has published its inclusive prefix; the tile publishes its own prefix and writes its
// values. Each value is read once and written once: 8n bytes, the copy's traffic.
//
// Loads and stores are 16-byte and coalesced: a warp moves its 512 values through shared memory
// (padded: no bank conflicts) between the striped order of the loads and the 16 consecutive values
// each thread scans.
#include <cuda_runtime.h>

#include <climits>

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int ITEMS = 16;                    // consecutive values per thread
constexpr int WARP_ITEMS = 32 * ITEMS;       // 512 values per warp
constexpr int TILE = THREADS * ITEMS;        // 4096 values per block
constexpr int WARP_VECTORS = WARP_ITEMS / 4; // 128 int4 per warp
constexpr int MAX_TILES = INT_MAX / TILE + 1;
constexpr unsigned FULL = 0xffffffffu;

// A tile's status word: the flag in the high 32 bits, the value in the low 32. One 64-bit store
// publishes both at once, so a reader never sees a flag without its value.
constexpr unsigned long long EMPTY = 0, AGGREGATE = 1, PREFIX = 2;
__device__ unsigned long long scan_state[1 + MAX_TILES];  // [0]: the tile counter; [1 + t]: tile t's status

__device__ __forceinline__ void publish(unsigned long long* status, unsigned long long flag, int value) {
    *reinterpret_cast<volatile unsigned long long*>(status) = (flag << 32) | (unsigned)value;
}

__device__ __forceinline__ int warp_sum(int v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(FULL, v, offset);
    return __shfl_sync(FULL, v, 0);
}

__device__ __forceinline__ int warp_inclusive_scan(int v, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        int other = __shfl_up_sync(FULL, v, d);
        if (lane >= d) v += other;
    }
    return v;
}

// The sum of every value before this tile (called by all 32 lanes of one warp). Publishes the tile's
// aggregate first, so the tiles after it can go on without waiting for this look-back, then its prefix.
__device__ int look_back(unsigned long long* status, int tile, int total, int lane) {
    if (tile == 0) {
        if (lane == 0) publish(status, PREFIX, total);
        return 0;
    }
    if (lane == 0) publish(status + tile, AGGREGATE, total);
    int exclusive = 0;
    for (int pred = tile - 1 - lane;; pred -= 32) {  // lane 0 reads the nearest predecessor
        unsigned long long word;
        do {  // wait until all 32 predecessors have published something
            word = pred >= 0 ? *reinterpret_cast<volatile unsigned long long*>(status + pred) : PREFIX << 32;
        } while (__any_sync(FULL, (word >> 32) == EMPTY));
        int value = (int)(unsigned)word;
        unsigned prefixes = __ballot_sync(FULL, (word >> 32) == PREFIX);
        if (prefixes) {  // the nearest prefix ends the look-back: add it and the aggregates before it
            int nearest = __ffs(prefixes) - 1;
            exclusive += warp_sum(lane <= nearest ? value : 0);
            break;
        }
        exclusive += warp_sum(value);
    }
    if (lane == 0) publish(status + tile, PREFIX, exclusive + total);
    return exclusive;
}

// Where value e of a warp's 512 lives in its staging buffer: one int4 of padding after every 8, so the
// 16-byte reads of 8 lanes (a quarter warp, one shared-memory wavefront) hit 8 different bank groups.
__device__ __forceinline__ int padded(int vector) { return vector + vector / 8; }

// The 16 consecutive values of this lane, loaded coalesced (lane l reads int4 number 32 j + l).
template <bool FULL_TILE>
__device__ __forceinline__ void load_values(const int* x, long long start, long long n, int4* stage, int lane, int (&v)[ITEMS]) {
    if (FULL_TILE) {
        const int4* x4 = reinterpret_cast<const int4*>(x + start);
        int4 loaded[ITEMS / 4];
#pragma unroll
        for (int j = 0; j < ITEMS / 4; ++j) loaded[j] = __ldg(x4 + j * 32 + lane);
#pragma unroll
        for (int j = 0; j < ITEMS / 4; ++j) stage[padded(j * 32 + lane)] = loaded[j];
    } else {  // the last tile: values past n count as 0
        int* flat = reinterpret_cast<int*>(stage);
#pragma unroll
        for (int j = 0; j < ITEMS; ++j) {
            int e = j * 32 + lane;
            flat[padded(e / 4) * 4 + e % 4] = start + e < n ? x[start + e] : 0;
        }
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < ITEMS / 4; ++j) {
        int4 q = stage[padded(lane * (ITEMS / 4) + j)];
        v[4 * j] = q.x, v[4 * j + 1] = q.y, v[4 * j + 2] = q.z, v[4 * j + 3] = q.w;
    }
    __syncwarp();  // the buffer is reused for the stores
}

template <bool FULL_TILE>
__device__ __forceinline__ void store_values(int* y, long long start, long long n, int4* stage, int lane, const int (&v)[ITEMS]) {
#pragma unroll
    for (int j = 0; j < ITEMS / 4; ++j)
        stage[padded(lane * (ITEMS / 4) + j)] = make_int4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    __syncwarp();
    if (FULL_TILE) {
        int4* y4 = reinterpret_cast<int4*>(y + start);
#pragma unroll
        for (int j = 0; j < ITEMS / 4; ++j) y4[j * 32 + lane] = stage[padded(j * 32 + lane)];
    } else {
        const int* flat = reinterpret_cast<const int*>(stage);
#pragma unroll
        for (int j = 0; j < ITEMS; ++j) {
            int e = j * 32 + lane;
            if (start + e < n) y[start + e] = flat[padded(e / 4) * 4 + e % 4];
        }
    }
}

struct Shared {
    int4 stage[WARPS][WARP_VECTORS + WARP_VECTORS / 8];
    int warp_offsets[WARPS];
    int tile_offset;
    int tile;
};

template <bool FULL_TILE>
__device__ __forceinline__ void scan_tile(const int* x, int* y, long long n, int tile, unsigned long long* status,
                                          Shared& shared) {
    int4* stage = shared.stage[threadIdx.x / 32];
    int* warp_offsets = shared.warp_offsets;
    int& tile_offset = shared.tile_offset;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long start = (long long)tile * TILE + warp * WARP_ITEMS;

    int v[ITEMS];
    load_values<FULL_TILE>(x, start, n, stage, lane, v);
#pragma unroll
    for (int k = 1; k < ITEMS; ++k) v[k] += v[k - 1];  // this thread's 16 values
    const int thread_total = v[ITEMS - 1];
    const int thread_inclusive = warp_inclusive_scan(thread_total, lane);
    if (lane == 31) warp_offsets[warp] = thread_inclusive;  // the warp's total, for now
    __syncthreads();

    if (warp == 0) {
        int warp_total = lane < WARPS ? warp_offsets[lane] : 0;
        int warp_inclusive = warp_inclusive_scan(warp_total, lane);
        int tile_total = __shfl_sync(FULL, warp_inclusive, WARPS - 1);
        if (lane < WARPS) warp_offsets[lane] = warp_inclusive - warp_total;  // now: the warps before it
        int before = look_back(status, tile, tile_total, lane);
        if (lane == 0) tile_offset = before;
    }
    __syncthreads();

    const int offset = tile_offset + warp_offsets[warp] + thread_inclusive - thread_total;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) v[k] += offset;
    store_values<FULL_TILE>(y, start, n, stage, lane, v);
}

__global__ void __launch_bounds__(THREADS) scan_kernel(const int* __restrict__ x, int* __restrict__ y, int n,
                                                        unsigned long long* state) {
    __shared__ Shared shared;
    if (threadIdx.x == 0) shared.tile = (int)atomicAdd(state, 1ull);  // tiles in the order blocks start
    __syncthreads();
    const int tile = shared.tile;
    if ((long long)(tile + 1) * TILE <= n) scan_tile<true>(x, y, n, tile, state + 1, shared);
    else scan_tile<false>(x, y, n, tile, state + 1, shared);
}

extern "C" void scan(const int* x, int* y, int n) {
    static unsigned long long* state = nullptr;
    if (state == nullptr) cudaGetSymbolAddress(reinterpret_cast<void**>(&state), scan_state);
    const int tiles = (int)(((long long)n + TILE - 1) / TILE);
    cudaMemsetAsync(state, 0, (1 + (size_t)tiles) * sizeof(unsigned long long));  // counter and statuses
    scan_kernel<<<tiles, THREADS>>>(x, y, n, state);
}
