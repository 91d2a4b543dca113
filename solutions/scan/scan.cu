// Solution — inclusive prefix sum of int32 in one pass: decoupled look-back (Merrill & Garland, CUB's
// design), with every tile's total published an iteration before its look-back.
//
// Tiles of TILE values are handed out in order by a global counter (a "ticket"), so every tile's
// predecessors are already being worked on. Each tile publishes its total (its "aggregate"); a tile's look-back
// reads its predecessors' status words, 32 at a time, adding aggregates until it meets one that has published
// its inclusive prefix, and publishes its own prefix. Each value is read once and written once: 8n bytes,
// the copy's traffic.
//
// A block holds two tiles in shared memory: the one it scans (t) and the next (t1). Each iteration it reads t
// into registers, starts copying the tile after next (t2, cp.async) into t's buffer, waits for t1's copy,
// sums t1 and publishes t1's aggregate; only then does warp 0 look back for t (whose aggregate went out an
// iteration ago) while the other warps scan their values in registers, and then t is stored. So when any
// tile looks back, the tiles before it have published their aggregates, and the SM's memory traffic (t2's
// copy, t's stores) goes on during the look-back.
//
// Why, by measurement (H200, 2^27 values, copy 4,160-4,250 GB/s; scripts/design_bench.py scan and scan-trace):
// the design before this one loaded each tile when its turn came and published its aggregate once loaded:
// 2,873-2,928 GB/s, 68%, torch.cumsum (CUB) 2,556, 60%. Its trace: a tile's loads 3.1-3.5 us, its look-back 3-4
// us (90th percentile 9-10), its stores 2.9-3.3; the SM moved no data during the look-back, which waited for
// predecessors whose loads had started at the same time as its own. Prefetching the next tile during the
// look-back (2,665) or only during the stores (2,629) did not help: the prefetched tile's aggregate still went
// out only when its block came to it, so the look-backs grew to 6-9 us. Loading the next tile into
// registers (two tiles sharing them: smaller tiles) measured 1,845-2,493. This design: 3,605-3,622 GB/s, 85%
// (1024 threads x 24 values, two 96 KB buffers; its trace: look-back 2.2 us, 4.3 at the 90th percentile, with
// the copies and stores going on); 1024 x 28 3,657 (86%, but 224 KB: Hopper only); 1024 x 16 3,483-3,498 (82%);
// 512 x 32 3,465; reading 64-128 predecessors a round trip 3,360-3,521 (the walk back is short once aggregates
// are out). At 2^24 it is level with the design before (2,591-2,661 GB/s against 2,628). At 2^20 its 24-value
// tiles are 43 for 132 SMs: 502-552 GB/s, slower than the design before (824) and torch.cumsum (684-728); so a
// call too small to give every resident block a tile runs a build of smaller tiles (SPREAD, the default: 8
// values a thread at 2^20, 128 tiles): 892 GB/s beside torch's 728 in the same run. Mid sizes gain from more,
// smaller tiles still: a build is used only if it gives every resident block SPREAD_MIN = 6 tiles (2^22: 8-value
// tiles, 1,900 GB/s against 1,469 with one tile a block and torch's 1,603; 2^24: 16-value tiles, 2,843 against
// 2,635 and torch's 2,249); 2^20 and 2^27 run the same kernels as before (917 and 3,623 GB/s in that run).
// The layout is warp-striped: a warp's row j is 128 consecutive values, lane l holding 4 of them as one int4,
// so loads and stores are coalesced with no transpose, and the scan of a row is one warp scan of the lanes'
// int4 totals. Each thread copies and reads only its own shared-memory slots, so waiting for its own copies
// is all the synchronisation the buffers need.
#include <cuda/atomic>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <climits>
#include <stdint.h>

#ifndef THREADS  // `kcourse tune scan` rebuilds with every combination of [tuning.cuda] in spec.toml
#define THREADS 1024
#endif
#ifndef ITEMS    // values per thread, a multiple of 4; two tiles of THREADS x ITEMS ints in shared memory
#define ITEMS 24
#endif
#ifndef READS    // predecessors each lane of the look-back reads a round trip (a window of 32 x READS)
#define READS 1
#endif
#ifndef SPREAD   // 1: a call too small to give every SM a tile of ITEMS values runs a build of smaller tiles
#define SPREAD 1
#endif
#ifndef SPREAD_MIN  // with SPREAD: the tiles every resident block must get from a build before a smaller one is used
#define SPREAD_MIN 6    // (H200: 6 beat 1 and 4 at 2^22 and 2^24; scripts/design_bench.py scan times the others)
#endif
#ifndef TRACE    // 1: each tile's phases timed (scripts/design_bench.py scan-trace reads them; not for grading)
#define TRACE 0
#endif

// Where a GPU's shared memory holds less than two tiles of ITEMS values, the host launches a build of
// smaller tiles: 16 values a thread (128 KB at 1024 threads: an A100's 164 KB a block), else 8 (64 KB:
// consumer cards' 99 KB).
constexpr int MID_ITEMS = ITEMS > 16 ? 16 : ITEMS, SMALL_ITEMS = 8;
constexpr int WARPS = THREADS / 32;
constexpr unsigned FULL = 0xffffffffu;
static_assert(ITEMS % 4 == 0 && ITEMS >= SMALL_ITEMS && THREADS % 32 == 0 && THREADS <= 1024,
              "ITEMS: a multiple of 4, at least 8; THREADS: whole warps");

template <int ITEMS_>
struct Tiling {
    static constexpr int ROWS = ITEMS_ / 4;        // int4s per thread: a warp's rows of 128 values
    static constexpr int WARP_ITEMS = 32 * ITEMS_;
    static constexpr int TILE = THREADS * ITEMS_;
    static constexpr int STAGE_BYTES = 2 * TILE * (int)sizeof(int);
};
constexpr int MAX_TILES = INT_MAX / Tiling<SMALL_ITEMS>::TILE + 1;

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
// thread 0 of its block saw them: 0 the tile's iteration began (the tile in shared memory), 1 the next tile
// landed, summed and its aggregate published (after the first barrier), 2 this tile's prefix known (after the
// second), 3 its stores issued; and 4 the SM it ran on. scan_trace() copies them out.
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

// Tile 0's total is its inclusive prefix: published as one at once.
__device__ __forceinline__ void publish_aggregate(int tile, int total, unsigned epoch) {
    publish(&tile_status[tile], epoch << 2 | (tile == 0 ? PREFIX : AGGREGATE), total);
}

// The sum of every value before this tile (called by all 32 lanes of warp 0); publishes the tile's prefix (its
// aggregate is already out). Lane l's k-th read of a window is the predecessor window - (32 k + l).
__device__ int look_back(int tile, int total, unsigned epoch, int lane) {
    if (tile == 0) return 0;
    const unsigned aggregate_tag = epoch << 2 | AGGREGATE, prefix_tag = epoch << 2 | PREFIX;
    int exclusive = 0;
    for (int window = tile - 1;; window -= 32 * READS) {
        for (;;) {
            unsigned long long word[READS];
#pragma unroll
            for (int k = 0; k < READS; ++k) {  // all in flight at once: one round trip
                const int pred = window - (k * 32 + lane);
                word[k] = pred >= 0 ? read_status(&tile_status[pred])
                                    : (unsigned long long)prefix_tag << 32;  // before tile 0: a prefix of 0
            }
            int sum = 0;
            bool found = false, all_published = true;
#pragma unroll
            for (int k = 0; k < READS && !found && all_published; ++k) {  // nearest 32 first
                const unsigned tag = (unsigned)(word[k] >> 32);
                const int value = (int)(unsigned)word[k];
                const unsigned empty = __ballot_sync(FULL, tag != aggregate_tag && tag != prefix_tag);
                const unsigned prefixes = __ballot_sync(FULL, tag == prefix_tag);
                const unsigned nearest_prefix = prefixes & (0u - prefixes);  // its bit, or 0
                if (prefixes && (empty & (nearest_prefix - 1)) == 0) {  // a prefix, everything nearer published
                    sum += __reduce_add_sync(FULL, lane <= __ffs(prefixes) - 1 ? value : 0);
                    found = true;
                } else if (!empty) {
                    sum += __reduce_add_sync(FULL, value);  // 32 aggregates
                } else {
                    all_published = false;  // one not out yet (rare: aggregates go out an iteration early)
                }
            }
            if (found) {
                exclusive += sum;
                if (lane == 0) publish(&tile_status[tile], prefix_tag, exclusive + total);
                return exclusive;
            }
            if (all_published) {  // 32 x READS aggregates: add them, look further back
                exclusive += sum;
                break;
            }
        }
    }
}

template <int ITEMS_>
__device__ __forceinline__ int values_left(long long start, long long n) {  // a warp's part of a partial tile
    constexpr int W = Tiling<ITEMS_>::WARP_ITEMS;
    return (int)(n - start < 0 ? 0 : n - start < W ? n - start : W);
}

// This thread's rows of a tile into its own slots (slot j * 32 + lane of its warp's part of a buffer):
// row j is 128 consecutive values from `start + 128 j`, lane l copying 4 of them.
template <int ITEMS_>
__device__ __forceinline__ void copy_rows_async(const int* x, long long start, long long n, bool full_tile, int lane,
                                                int4* slots) {
    const int* xs = x + start;
    const int left = values_left<ITEMS_>(start, n);
#pragma unroll
    for (int j = 0; j < Tiling<ITEMS_>::ROWS; ++j) {
        const int e = j * 128 + 4 * lane;
        if (full_tile) {
            __pipeline_memcpy_async(&slots[j * 32 + lane], xs + e, sizeof(int4));
        } else {  // the last tile (or unaligned pointers): values past n count as 0
            int* slot = reinterpret_cast<int*>(&slots[j * 32 + lane]);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (e + k < left) __pipeline_memcpy_async(slot + k, xs + e + k, sizeof(int));
                else slot[k] = 0;
            }
        }
    }
}

template <int ITEMS_>
__device__ __forceinline__ void store_rows(int* y, long long start, long long n, bool full_tile, int lane,
                                           const int4 (&q)[Tiling<ITEMS_>::ROWS]) {
    if (full_tile) {
        int4* y4 = reinterpret_cast<int4*>(y + start);
#pragma unroll
        for (int j = 0; j < Tiling<ITEMS_>::ROWS; ++j) y4[j * 32 + lane] = q[j];
    } else {
        int* ys = y + start;
        const int left = values_left<ITEMS_>(start, n);
#pragma unroll
        for (int j = 0; j < Tiling<ITEMS_>::ROWS; ++j) {
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
template <int ROWS>
__device__ __forceinline__ void scan_rows(int4 (&q)[ROWS], int before, int lane) {
#pragma unroll
    for (int j = 0; j < ROWS; ++j) q[j].y += q[j].x, q[j].z += q[j].y, q[j].w += q[j].z;  // within each int4
    int inclusive[ROWS];  // per row: the lane's int4 total, then its inclusive scan over the lanes
#pragma unroll
    for (int j = 0; j < ROWS; ++j) inclusive[j] = q[j].w;
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
    int warp_totals[2][WARPS];  // by buffer: the warps' totals of the tile in it (summed as it landed)
    int tile_prefix;
    int tickets[3];             // iteration k: this tile k % 3, the next (k + 1) % 3, the one after (k + 2) % 3
};

constexpr int TICKET_THREAD = THREADS - 32;  // lane 0 of the last warp: its wait for the atomic hides behind the look-back
constexpr int NO_TILE = INT_MAX;             // a ticket slot with no ticket (the block took its last one)

template <int ITEMS_>
struct Launch {
    const int* x;
    int* y;
    int n, tiles;
    unsigned epoch;
    bool aligned;  // x and y 16-byte aligned: whole tiles move as int4s

    static constexpr int TILE = Tiling<ITEMS_>::TILE;
    __device__ bool full(int tile) const { return aligned && (long long)(tile + 1) * TILE <= n; }
    __device__ long long start(int tile) const {
        return (long long)tile * TILE + (long long)(threadIdx.x / 32) * Tiling<ITEMS_>::WARP_ITEMS;
    }
    // Commits a group even with no tile, so "all groups but the newest landed" always means the older tile.
    __device__ void copy(int tile, int4* slots) const {
        if (tile < tiles) copy_rows_async<ITEMS_>(x, start(tile), n, full(tile), threadIdx.x % 32, slots);
        __pipeline_commit();
    }
};

// Waits for the copy of `tile` into `slots` (every group but the newest), sums it and publishes its
// aggregate; its warps' totals go to shared.warp_totals[buffer] for when its turn comes.
template <int ITEMS_>
__device__ __forceinline__ void sum_ahead(const Launch<ITEMS_>& L, int tile, int buffer, const int4* slots,
                                          Shared& shared) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __pipeline_wait_prior(1);
    int thread_total = 0;
#pragma unroll
    for (int j = 0; j < Tiling<ITEMS_>::ROWS; ++j) {
        const int4 v = slots[j * 32 + lane];
        thread_total += v.x + v.y + v.z + v.w;
    }
    const int warp_total = __reduce_add_sync(FULL, thread_total);
    if (lane == 0) shared.warp_totals[buffer][warp] = warp_total;
    __syncthreads();
    if (warp == 0 && tile < L.tiles) {
        const int total = __reduce_add_sync(FULL, lane < WARPS ? shared.warp_totals[buffer][lane] : 0);
        if (lane == 0) publish_aggregate(tile, total, L.epoch);
    }
}

// The block's first tile and the next: tickets taken, copies started, the first tile's aggregate out.
// Returns the first tile (tiles or more: the block has none).
template <int ITEMS_>
__device__ __forceinline__ int start_block(const Launch<ITEMS_>& L, Shared& shared, int4* mine) {
    if (threadIdx.x == 0) shared.tickets[0] = take_ticket(L.tiles);
    __syncthreads();
    const int tile = shared.tickets[0];
    if (tile >= L.tiles) return tile;
    if (threadIdx.x == 0) shared.tickets[1] = take_ticket(L.tiles);
    L.copy(tile, mine);
    __syncthreads();
    const int next = shared.tickets[1];
    if (threadIdx.x == 0) shared.tickets[2] = next < L.tiles ? take_ticket(L.tiles) : NO_TILE;
    L.copy(next, mine + Tiling<ITEMS_>::TILE / 4);
    sum_ahead(L, tile, 0, mine, shared);  // its barrier also makes tickets[2] visible
    return tile;
}

template <int ITEMS_>
__global__ void __launch_bounds__(THREADS, 1) scan_kernel(Launch<ITEMS_> L) {
    using T = Tiling<ITEMS_>;
    extern __shared__ int4 stage[];  // two tiles: buffer b at stage + b * TILE / 4, each warp its ROWS x 32 slots
    __shared__ Shared shared;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int4* const mine = stage + warp * T::ROWS * 32;
    int tile = start_block(L, shared, mine);
    if (tile >= L.tiles) return;

    for (int k = 0, b = 0;; ++k, b ^= 1) {  // this tile in buffer b (landed), the next one's copy in flight
        mark(tile, 0);
        const int next = shared.tickets[(k + 1) % 3], after = shared.tickets[(k + 2) % 3];
        int4 q[T::ROWS];
#pragma unroll
        for (int j = 0; j < T::ROWS; ++j) q[j] = mine[b * T::TILE / 4 + j * 32 + lane];
        L.copy(after, mine + b * T::TILE / 4);  // the tile after next, into the slots just read
        const int warp_value = lane < WARPS ? shared.warp_totals[b][lane] : 0;
        const int warps_before = __reduce_add_sync(FULL, lane < warp ? warp_value : 0);
        const int total = __reduce_add_sync(FULL, warp_value);
        sum_ahead(L, next, b ^ 1, mine + (b ^ 1) * T::TILE / 4, shared);  // the next tile's aggregate goes out
        mark(tile, 1);
        if (threadIdx.x == TICKET_THREAD) shared.tickets[k % 3] = after < L.tiles ? take_ticket(L.tiles) : NO_TILE;
        if (warp == 0) {
            const int before = look_back(tile, total, L.epoch, lane);
            if (lane == 0) shared.tile_prefix = before;
        }
        scan_rows(q, warps_before, lane);  // warps 1.. overlap this with warp 0's look-back
        __syncthreads();
        mark(tile, 2);
        const int tile_prefix = shared.tile_prefix;
#pragma unroll
        for (int j = 0; j < T::ROWS; ++j) add(q[j], tile_prefix);
        store_rows<ITEMS_>(L.y, L.start(tile), L.n, L.full(tile), lane, q);
        mark(tile, 3);
        if (next >= L.tiles) return;
        tile = next;
    }
}

// The blocks of one build that fit on the GPU at once (0: none: its shared memory does not fit).
template <int ITEMS_>
int resident_blocks(int sms) {
    int per_sm = 0;
    if (cudaFuncSetAttribute(scan_kernel<ITEMS_>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             Tiling<ITEMS_>::STAGE_BYTES) != cudaSuccess) {
        cudaGetLastError();  // not sticky: clear it so the caller's error check sees only its own
        return 0;
    }
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, scan_kernel<ITEMS_>, THREADS, Tiling<ITEMS_>::STAGE_BYTES);
    return sms * per_sm;
}

template <int ITEMS_>
void launch(const int* x, int* y, int n, unsigned epoch, int resident) {
    const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    const int tiles = (int)(((long long)n + Tiling<ITEMS_>::TILE - 1) / Tiling<ITEMS_>::TILE);
    const Launch<ITEMS_> L{x, y, n, tiles, epoch, aligned};
    scan_kernel<ITEMS_><<<tiles < resident ? tiles : resident, THREADS, Tiling<ITEMS_>::STAGE_BYTES>>>(L);
}

// Which build a call of n values runs (0: ITEMS, 1: MID_ITEMS, 2: SMALL_ITEMS), given each build's resident
// blocks (0: its shared memory does not fit this GPU): the largest that fits; with SPREAD, the largest whose
// tiles give every resident block SPREAD_MIN, so a small call is spread over every SM (else the smallest that fits).
int pick_build(int n, const int (&resident)[3]) {
    const long long tile[3] = {Tiling<ITEMS>::TILE, Tiling<MID_ITEMS>::TILE, Tiling<SMALL_ITEMS>::TILE};
    int smallest = 2;
    while (smallest > 0 && resident[smallest] <= 0) --smallest;
    for (int b = 0; b < 3; ++b)
        if (resident[b] > 0 && (!SPREAD || ((long long)n + tile[b] - 1) / tile[b] >= (long long)SPREAD_MIN * resident[b]))
            return b;
    return smallest;
}

extern "C" void scan(const int* x, int* y, int n) {
    static unsigned epoch = 0;  // this call's number, 1 .. 2^30 - 1: the zeroed words of a first call never match
    static int resident[3] = {-1, -1, -1};  // each build's blocks that fit on the GPU at once (-1: not asked yet)
    if (n <= 0) return;
    if (resident[0] < 0) {
        int sms = 0, device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        resident[0] = resident_blocks<ITEMS>(sms);
        resident[1] = resident_blocks<MID_ITEMS>(sms);
        resident[2] = resident_blocks<SMALL_ITEMS>(sms);
        void* address = nullptr;  // the statuses and the counter start at 0 (also what compute-sanitizer's initcheck wants)
        cudaGetSymbolAddress(&address, tile_status);
        cudaMemset(address, 0, sizeof(tile_status));
        cudaGetSymbolAddress(&address, tile_counter);
        cudaMemset(address, 0, sizeof(tile_counter));
    }
    epoch = epoch % MAX_EPOCH + 1;
    const int build = pick_build(n, resident);
    const int blocks = resident[build] > 0 ? resident[build] : 1;  // none fits: the launch reports why
    if (build == 0) launch<ITEMS>(x, y, n, epoch, blocks);
    else if (build == 1) launch<MID_ITEMS>(x, y, n, epoch, blocks);
    else launch<SMALL_ITEMS>(x, y, n, epoch, blocks);
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
