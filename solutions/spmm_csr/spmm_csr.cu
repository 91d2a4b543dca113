// Solution — C = A B for a CSR matrix A and a dense row-major B, balanced over the entries.
//
// Work is split by entries, not rows: warp w takes entries [256 w, 256 w + 256) of A, whatever rows
// they fall in, so one row of 16,384 entries is shared by 64 warps instead of keeping one warp busy
// while the rest of the GPU idles. A warp finds the row of its first entry with a 32-way search of
// row_ptr (each lane probes one place: 4 rounds for 131,072 rows), then walks its entries: lanes fetch
// 32 (column, value) pairs at once and pass them round with shuffles; for each entry every lane loads
// 4 columns of B's row (a float4: the warp reads 512 contiguous bytes), 8 entries' loads in flight
// before their sums; at each row end (the next 32 rows' ends sit one per lane: crossing a row is a
// shuffle) it writes its 4 columns of C — a plain store when the warp held the whole row, an
// atomicAdd onto the zeroed C when the row was cut between warps. A grid column per
// 128 columns of C (per 32 when N is not a multiple of 4: then 4-byte loads, B's rows being unaligned).
#include <cuda_runtime.h>

#include <climits>

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int CHUNK = 256;   // entries per warp
constexpr int UNROLL = 8;    // entries whose B loads are in flight together
constexpr unsigned FULL = 0xffffffffu;

// The row holding entry e: the last r < M with row_ptr[r] <= e (empty rows before it share its start).
// All 32 lanes call it; each round they probe 32 places of [lo, hi) and keep the piece holding the answer.
__device__ int row_of(const int* __restrict__ row_ptr, int M, long long e, int lane) {
    int lo = 0, hi = M;  // row_ptr[lo] <= e, and the answer is in [lo, hi)
    while (hi - lo > 1) {
        const int span = hi - lo;
        const bool few = span <= 33;  // then probe lo + 1, lo + 2, ... directly
        const int probe = few ? lo + 1 + lane : lo + (int)((long long)span * (lane + 1) / 33);
        const bool below = (few ? probe < hi : true) && __ldg(row_ptr + probe) <= e;
        const int count = __popc(__ballot_sync(FULL, below));  // the probes at or below e form a prefix
        if (few) return lo + count;
        const int new_lo = count > 0 ? __shfl_sync(FULL, probe, count - 1) : lo;
        const int new_hi = count < 32 ? __shfl_sync(FULL, probe, count) : hi;
        lo = new_lo, hi = new_hi;
    }
    return lo;
}

// VEC columns per lane: 4 (float4 loads) when N % 4 == 0, else 1.
template <int VEC>
struct Columns {
    float v[VEC];
};

template <int VEC>
__device__ __forceinline__ Columns<VEC> load_row(const float* __restrict__ p, bool active) {
    Columns<VEC> c;
    if constexpr (VEC == 4) {
        const float4 q = active ? __ldg(reinterpret_cast<const float4*>(p)) : make_float4(0.f, 0.f, 0.f, 0.f);
        c.v[0] = q.x, c.v[1] = q.y, c.v[2] = q.z, c.v[3] = q.w;
    } else {
        c.v[0] = active ? __ldg(p) : 0.f;
    }
    return c;
}

// Writes a finished row's columns: stored when this warp held the whole row, added when it was cut.
template <int VEC>
__device__ __forceinline__ void flush(float* __restrict__ c, Columns<VEC>& acc, bool whole, bool active) {
    if (active && whole) {
        if constexpr (VEC == 4) *reinterpret_cast<float4*>(c) = make_float4(acc.v[0], acc.v[1], acc.v[2], acc.v[3]);
        else c[0] = acc.v[0];
    } else if (active) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) atomicAdd(c + k, acc.v[k]);
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc.v[k] = 0.f;
}

template <int VEC>
__global__ void __launch_bounds__(THREADS) spmm_kernel(const int* __restrict__ row_ptr, const int* __restrict__ col_idx,
                                                        const float* __restrict__ values, const float* __restrict__ B,
                                                        float* __restrict__ C, int M, int N, long long nnz) {
    const int lane = threadIdx.x % 32;
    const long long begin = ((long long)blockIdx.x * WARPS + threadIdx.x / 32) * CHUNK;
    if (begin >= nnz) return;  // the whole warp: past the last chunk
    const long long end = begin + CHUNK < nnz ? begin + CHUNK : nnz;
    const int column = (blockIdx.y * 32 + lane) * VEC;
    const bool active = column < N;

    int row = row_of(row_ptr, M, begin, lane);
    // The ends of the next 32 rows, one per lane, so crossing a row costs a shuffle, not a load.
    int ends_from = row;
    int my_end = ends_from + 1 + lane <= M ? __ldg(row_ptr + ends_from + 1 + lane) : INT_MAX;
    long long row_start = __ldg(row_ptr + row), row_end = __shfl_sync(FULL, my_end, 0);
    Columns<VEC> acc;
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc.v[k] = 0.f;

    for (long long base = begin; base < end; base += 32) {
        const int count = end - base < 32 ? (int)(end - base) : 32;
        const int my_col = lane < count ? __ldg(col_idx + base + lane) : 0;
        const float my_val = lane < count ? __ldg(values + base + lane) : 0.f;
        for (int j = 0; j < count; j += UNROLL) {
            Columns<VEC> b[UNROLL];
            float a[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {  // every entry's B row requested before any is used
                const int col = __shfl_sync(FULL, my_col, (j + u) & 31);
                a[u] = __shfl_sync(FULL, my_val, (j + u) & 31);
                b[u] = load_row<VEC>(B + (size_t)col * N + column, active && j + u < count);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if (j + u >= count) break;
                const long long e = base + j + u;
                while (e >= row_end) {  // past the end of the row (and of any empty rows after it)
                    flush<VEC>(C + (size_t)row * N + column, acc, row_start >= begin && row_end <= end, active);
                    ++row;
                    row_start = row_end;
                    if (row - ends_from == 32) {  // the next 32 ends
                        ends_from = row;
                        my_end = ends_from + 1 + lane <= M ? __ldg(row_ptr + ends_from + 1 + lane) : INT_MAX;
                    }
                    row_end = __shfl_sync(FULL, my_end, row - ends_from);
                }
#pragma unroll
                for (int k = 0; k < VEC; ++k) acc.v[k] = fmaf(a[u], b[u].v[k], acc.v[k]);
            }
        }
    }
    flush<VEC>(C + (size_t)row * N + column, acc, row_start >= begin && row_end <= end, active);
}

extern "C" void spmm_csr(const int* row_ptr, const int* col_idx, const float* values, const float* B, float* C,
                         int M, int K, int N, int nnz) {
    (void)K;  // B's rows are found through col_idx; K only bounds them
    cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float));  // empty rows are 0, and cut rows are added onto 0
    if (nnz == 0) return;
    const long long chunks = ((long long)nnz + CHUNK - 1) / CHUNK;
    const unsigned blocks = (unsigned)((chunks + WARPS - 1) / WARPS);
    if (N % 4 == 0) spmm_kernel<4><<<dim3(blocks, (N / 4 + 31) / 32), THREADS>>>(row_ptr, col_idx, values, B, C, M, N, nnz);
    else spmm_kernel<1><<<dim3(blocks, (N + 31) / 32), THREADS>>>(row_ptr, col_idx, values, B, C, M, N, nnz);
}
