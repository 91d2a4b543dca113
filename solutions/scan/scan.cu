// Solution — inclusive prefix sum of int32 in one pass: decoupled look-back (Merrill & Garland, CUB's
// design).
//
// Tiles of TILE values are handed out in order by a global counter (a "ticket"), so every tile's
// predecessors are already being worked on. A block loads its tile with 16-byte loads, sums it (each
// thread its ITEMS values, then the warps' totals) and publishes the tile's total (its "aggregate") at
// once. Warp 0 then looks back over the predecessors' status words, 32 at a time, adding aggregates until
// it meets one that has published its inclusive prefix, and publishes the tile's own prefix; meanwhile the
// other warps scan their values in registers. Then every value gets the prefix of the tiles before it and
// is stored. Each value is read once and written once: 8n bytes, the copy's traffic.
//
// What keeps the memory busy: the look-back and the barriers are latency, paid once per tile, so the
// tiles are big (8K-32K values) and the blocks stay: as many as fit on the GPU, each taking tile after
// tile. A block takes its next ticket while it scans the current tile. With PREFETCH it also copies the
// next tile into shared memory (cp.async) while it looks back and stores; on an H200 that measured slower
// than 512-thread tiles loaded when their turn comes (2,340 against 2,615 GB/s), so it is off. One
// 1024-thread block an SM with 32K-value tiles beat two 512-thread blocks with 16K: 2,831 against 2,719
// GB/s on an H200 (68% and 66% of copy, torch.cumsum 2,561), and on an H100 2,288 against 2,171 (77%, 73%;
// torch.cumsum 2,087; that 1024-thread build read 64 predecessors a round trip): fewer, bigger tiles pay
// the look-back fewer times. Reading 64-128 predecessors a round trip, instead of 32, measured no better.
// Loading the next tile into registers before this one's look-back (nine builds of 256-1024 threads, 8-32
// values a thread: two tiles then share the registers) measured 1,845-2,493 GB/s at 2^27 on an H200, against
// this build's 2,904 in the same run: smaller tiles pay the look-back more often than the overlap saves.
// The layout is warp-striped: a warp's row j is 128 consecutive values, lane l holding 4 of them
// as one int4, so loads and stores are coalesced with no shared-memory transpose, and the scan of a row
// is one warp scan of the lanes' int4 totals.
#include <cuda/atomic>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <climits>
#include <stdint.h>

#ifndef THREADS  // `kcourse tune scan` rebuilds with every combination of [tuning.cuda] in spec.toml
#define THREADS 1024
#endif
#ifndef ITEMS    // values per thread, a multiple of 4
#define ITEMS 32
#endif
#ifndef PREFETCH  // 1: the next tile is copied to shared memory while this one is scanned; 0: loaded when its turn comes
#define PREFETCH 0
#endif
#ifndef SLEEP_NS  // the look-back's pause before it reads its window again (0: spin)
#define SLEEP_NS 0
#endif
#ifndef TRACE  // 1: each tile's phases timed (scripts/design_bench.py scan-trace reads them; not for grading)
#define TRACE 0
#endif

constexpr int WARPS = THREADS / 32;
constexpr int ROWS = ITEMS / 4;              // int4s per thread: a warp's rows of 128 values
constexpr int WARP_ITEMS = 32 * ITEMS;
constexpr int TILE = THREADS * ITEMS;
constexpr int MAX_TILES = INT_MAX / TILE + 1;
constexpr int STAGE_BYTES = PREFETCH ? TILE * (int)sizeof(int) : 0;  // shared memory for the next tile
constexpr unsigned FULL = 0xffffffffu;
static_assert(ITEMS % 4 == 0 && THREADS % 32 == 0 && THREADS <= 1024, "ITEMS: a multiple of 4; THREADS: whole warps");

// A tile's status word: the value in the low 32 bits, a tag in the high 32: the call's number ("epoch",
// 30 bits) and a 2-bit flag. One 64-bit store publishes both, so a reader never sees a flag without its
// value; a word left by an earlier call has another epoch and reads as "not yet published", so the
// statuses need no clearing between calls.
constexpr unsigned AGGREGATE = 1, PREFIX = 2;
constexpr unsigned MAX_EPOCH = (1u << 30) - 1;
__device__ unsigned long long tile_status[MAX_TILES];
__device__ unsigned tile_counter;  // the next ticket; the block taking the launch's last ticket resets it to 0

using DeviceWord = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;

// TRACE: when each tile's phases ended, by its SM's cycle counter (clock64: exact, but each SM's own), as
// thread 0 of its block saw them: 0 its loads issued, 1 loaded and summed (after the first barrier), 2 its
// prefix known (after the second), 3 its stores issued; and 4 the SM it ran on. scan_trace() copies them out.
constexpr int TRACE_TILES = TRACE ? 1 << 16 : 1, TRACE_FIELDS = 5;
__device__ unsigned long long tile_trace[TRACE_TILES][TRACE_FIELDS];

__device__ __forceinline__ void mark(int tile, int phase) {
    if (!TRACE || threadIdx.x != 0 || tile >= TRACE_TILES) return;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    tile_trace[tile][phase] = (unsigned long long)clock64();
    tile_trace[tile][4] = sm;
}

__device__ __forceinline__ void publish(unsigned long long* status, unsigned tag, int value) {
    DeviceWord(*status).store((unsigned long long)tag << 32 | (unsigned)value, cuda::memory_order_relaxed);
}

__device__ __forceinline__ unsigned long long read_status(unsigned long long* status) {
    return DeviceWord(*status).load(cuda::memory_order_relaxed);  // L2: never a stale copy from L1
}

// A block takes tickets until one is past the last tile: tiles + gridDim.x tickets in all, so the one
// numbered tiles + gridDim.x - 1 is the last of the launch and no block takes another after it.
__device__ __forceinline__ int take_ticket(int tiles) {
    const unsigned ticket = atomicAdd(&tile_counter, 1u);
    if (ticket == (unsigned)tiles + gridDim.x - 1) atomicExch(&tile_counter, 0u);  // ready for the next call
    return (int)ticket;
}

// The sum of every value before this tile (called by all 32 lanes of warp 0). Publishes the tile's
// aggregate first, so the tiles after it can go on without waiting for this look-back, then its prefix.
__device__ int look_back(int tile, int total, unsigned epoch, int lane) {
    const unsigned aggregate_tag = epoch << 2 | AGGREGATE, prefix_tag = epoch << 2 | PREFIX;
    if (tile == 0) {
        if (lane == 0) publish(&tile_status[0], prefix_tag, total);
        return 0;
    }
    if (lane == 0) publish(&tile_status[tile], aggregate_tag, total);
    int exclusive = 0;
    for (int window = tile - 1;; window -= 32) {  // lane 0 reads the nearest predecessor
        const int pred = window - lane;
        for (;;) {
            const unsigned long long word = pred >= 0 ? read_status(&tile_status[pred])
                                                      : (unsigned long long)prefix_tag << 32;  // before tile 0: 0
            const unsigned tag = (unsigned)(word >> 32);
            const int value = (int)(unsigned)word;
            const unsigned empty = __ballot_sync(FULL, tag != aggregate_tag && tag != prefix_tag);
            const unsigned prefixes = __ballot_sync(FULL, tag == prefix_tag);
            const unsigned nearest_prefix = prefixes & (0u - prefixes);  // its bit, or 0
            if (prefixes && (empty & (nearest_prefix - 1)) == 0) {  // a prefix, everything nearer published
                const int nearest = __ffs(prefixes) - 1;
                exclusive += __reduce_add_sync(FULL, lane <= nearest ? value : 0);
                if (lane == 0) publish(&tile_status[tile], prefix_tag, exclusive + total);
                return exclusive;
            }
            if (!empty) {  // 32 aggregates: add them, look further back
                exclusive += __reduce_add_sync(FULL, value);
                break;
            }
            if (SLEEP_NS > 0) __nanosleep(SLEEP_NS);  // a predecessor is still loading: read the window again
        }
    }
}

// How many of a warp's values from `start` on are below n (0 .. WARP_ITEMS): its part of a partial tile.
__device__ __forceinline__ int values_left(long long start, long long n) {
    return (int)(n - start < 0 ? 0 : n - start < WARP_ITEMS ? n - start : WARP_ITEMS);
}

// Row j of this warp's values: 128 consecutive values from `start + 128 j`, lane l holding 4 of them.
template <bool FULL_TILE>
__device__ __forceinline__ void load_rows(const int* x, long long start, long long n, int lane, int4 (&q)[ROWS]) {
    if (FULL_TILE) {
        const int4* x4 = reinterpret_cast<const int4*>(x + start);
#pragma unroll
        for (int j = 0; j < ROWS; ++j) q[j] = __ldg(x4 + j * 32 + lane);  // all in flight before the first add
    } else {  // the last tile (or unaligned pointers): values past n count as 0
        const int* xs = x + start;
        const int left = values_left(start, n);
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            const int e = j * 128 + 4 * lane;
            q[j] = make_int4(e < left ? xs[e] : 0, e + 1 < left ? xs[e + 1] : 0, e + 2 < left ? xs[e + 2] : 0,
                             e + 3 < left ? xs[e + 3] : 0);
        }
    }
}

// PREFETCH: the same rows copied into this lane's own slots of shared memory (slot j * 32 + lane), so only
// this thread ever writes or reads them: waiting for its own copies is all the synchronisation they need.
template <bool FULL_TILE>
__device__ __forceinline__ void copy_rows_async(const int* x, long long start, long long n, int lane, int4* slots) {
    const int* xs = x + start;
    const int left = values_left(start, n);
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const int e = j * 128 + 4 * lane;
        if (FULL_TILE) {
            __pipeline_memcpy_async(&slots[j * 32 + lane], xs + e, sizeof(int4));
        } else {
            int* slot = reinterpret_cast<int*>(&slots[j * 32 + lane]);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (e + k < left) __pipeline_memcpy_async(slot + k, xs + e + k, sizeof(int));
                else slot[k] = 0;
            }
        }
    }
    __pipeline_commit();
}

template <bool FULL_TILE>
__device__ __forceinline__ void store_rows(int* y, long long start, long long n, int lane, const int4 (&q)[ROWS]) {
    if (FULL_TILE) {
        int4* y4 = reinterpret_cast<int4*>(y + start);
#pragma unroll
        for (int j = 0; j < ROWS; ++j) y4[j * 32 + lane] = q[j];
    } else {
        int* ys = y + start;
        const int left = values_left(start, n);
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            const int e = j * 128 + 4 * lane;
            if (e < left) ys[e] = q[j].x;
            if (e + 1 < left) ys[e + 1] = q[j].y;
            if (e + 2 < left) ys[e + 2] = q[j].z;
            if (e + 3 < left) ys[e + 3] = q[j].w;
        }
    }
}

__device__ __forceinline__ void add(int4& q, int v) { q.x += v, q.y += v, q.z += v, q.w += v; }

// Each lane's 4 values of each row become this warp's inclusive prefix sums, starting from `before`.
__device__ __forceinline__ void scan_rows(int4 (&q)[ROWS], int before, int lane) {
    int inclusive[ROWS];  // per row: the lane's int4 total, then its inclusive scan over the lanes
#pragma unroll
    for (int j = 0; j < ROWS; ++j) inclusive[j] = q[j].w;  // q already scanned within each int4
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {  // ROWS independent shuffles in flight at once
            const int other = __shfl_up_sync(FULL, inclusive[j], d);
            if (lane >= d) inclusive[j] += other;
        }
    }
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        add(q[j], before + inclusive[j] - q[j].w);  // the rows above, the lanes to the left
        before += __shfl_sync(FULL, inclusive[j], 31);
    }
}

struct Shared {
    int warp_totals[WARPS];
    int tile_prefix;
    int tickets[2];  // the block's next two tiles: iteration k reads slot (k + 1) % 2 and refills slot k % 2
};

constexpr int TICKET_THREAD = THREADS - 32;  // lane 0 of the last warp: its wait for the atomic hides behind the look-back

struct Launch {
    const int* x;
    int* y;
    int n, tiles;
    unsigned epoch;
    bool aligned;  // x and y 16-byte aligned: whole tiles move as int4s

    __device__ bool full(int tile) const { return aligned && (long long)(tile + 1) * TILE <= n; }
    __device__ long long start(int tile) const { return (long long)tile * TILE + (long long)(threadIdx.x / 32) * WARP_ITEMS; }
    __device__ void prefetch(int tile, int4* slots) const {
        if (full(tile)) copy_rows_async<true>(x, start(tile), n, threadIdx.x % 32, slots);
        else copy_rows_async<false>(x, start(tile), n, threadIdx.x % 32, slots);
    }
};

// Scans one tile (the block's iteration k, of parity `odd`); returns the block's next tile (tiles or more: none).
template <bool FULL_TILE>
__device__ __forceinline__ int scan_tile(const Launch& L, int tile, int odd, Shared& shared, int4* slots) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long start = L.start(tile);

    mark(tile, 0);
    int4 q[ROWS];
    if (PREFETCH) {
        __pipeline_wait_prior(0);  // this thread's copies have landed
#pragma unroll
        for (int j = 0; j < ROWS; ++j) q[j] = slots[j * 32 + lane];
    } else {
        load_rows<FULL_TILE>(L.x, start, L.n, lane, q);
    }
    int thread_total = 0;
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {  // scan within each int4; its last value is its total
        q[j].y += q[j].x, q[j].z += q[j].y, q[j].w += q[j].z;
        thread_total += q[j].w;
    }
    const int warp_total = __reduce_add_sync(FULL, thread_total);
    if (lane == 0) shared.warp_totals[warp] = warp_total;
    __syncthreads();
    mark(tile, 1);

    const int next = shared.tickets[odd ^ 1];  // taken last iteration (or before the first)
    if (threadIdx.x == TICKET_THREAD && next < L.tiles) shared.tickets[odd] = take_ticket(L.tiles);  // the tile after it
    if (PREFETCH && next < L.tiles) L.prefetch(next, slots);  // the slots were read (and used) above
    const int warp_value = lane < WARPS ? shared.warp_totals[lane] : 0;
    const int warps_before = __reduce_add_sync(FULL, lane < warp ? warp_value : 0);
    if (warp == 0) {  // the tile's total goes out before any of the scan's work
        const int before = look_back(tile, __reduce_add_sync(FULL, warp_value), L.epoch, lane);
        if (lane == 0) shared.tile_prefix = before;
    }
    scan_rows(q, warps_before, lane);  // warps 1.. overlap this with warp 0's look-back
    __syncthreads();
    mark(tile, 2);

    const int tile_prefix = shared.tile_prefix;
#pragma unroll
    for (int j = 0; j < ROWS; ++j) add(q[j], tile_prefix);
    store_rows<FULL_TILE>(L.y, start, L.n, lane, q);
    mark(tile, 3);
    return next;
}

__global__ void __launch_bounds__(THREADS, (1024 + THREADS - 1) / THREADS)  // at most 64 registers a thread
scan_kernel(Launch L) {
    extern __shared__ int4 stage[];  // PREFETCH: the next tile, ROWS x 32 int4 slots per warp
    __shared__ Shared shared;
    int4* slots = stage + (threadIdx.x / 32) * ROWS * 32;
    if (threadIdx.x == 0) shared.tickets[0] = take_ticket(L.tiles);
    __syncthreads();
    int tile = shared.tickets[0];
    if (threadIdx.x == TICKET_THREAD && tile < L.tiles) shared.tickets[1] = take_ticket(L.tiles);  // read after a barrier
    if (PREFETCH && tile < L.tiles) L.prefetch(tile, slots);
    for (int odd = 0; tile < L.tiles; odd ^= 1)
        tile = L.full(tile) ? scan_tile<true>(L, tile, odd, shared, slots) : scan_tile<false>(L, tile, odd, shared, slots);
}

extern "C" void scan(const int* x, int* y, int n) {
    static unsigned epoch = 0;  // this call's number, 1 .. 2^30 - 1: the zeroed words of a first call never match
    static int resident = 0;    // blocks that fit on the GPU at once
    if (n <= 0) return;
    if (resident == 0) {
        int sms = 0, per_sm = 0, device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaFuncSetAttribute(scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGE_BYTES);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, scan_kernel, THREADS, STAGE_BYTES);
        resident = sms * per_sm > 0 ? sms * per_sm : 1;
        void* address = nullptr;  // the statuses and the counter start at 0 (also what compute-sanitizer's initcheck wants)
        cudaGetSymbolAddress(&address, tile_status);
        cudaMemset(address, 0, sizeof(tile_status));
        cudaGetSymbolAddress(&address, tile_counter);
        cudaMemset(address, 0, sizeof(tile_counter));
    }
    epoch = epoch % MAX_EPOCH + 1;
    const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    const int tiles = (int)(((long long)n + TILE - 1) / TILE);
    const Launch launch{x, y, n, tiles, epoch, aligned};
    scan_kernel<<<tiles < resident ? tiles : resident, THREADS, STAGE_BYTES>>>(launch);
}

// TRACE builds: the last call's phase times (see tile_trace), `tiles` rows of TRACE_FIELDS values, at most
// TRACE_TILES; *khz: the SM clock's rated rate, to turn cycles into time.
extern "C" int scan_trace(unsigned long long* out, int tiles, int* khz) {
    if (!TRACE) return 0;
    tiles = tiles < TRACE_TILES ? tiles : TRACE_TILES;
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(khz, cudaDevAttrClockRate, device);
    cudaDeviceSynchronize();
    cudaMemcpyFromSymbol(out, tile_trace, sizeof(unsigned long long) * TRACE_FIELDS * tiles);
    return tiles;
}
