// Day 19 — self-attention on cuBLAS, float32 (instructor solution): out = softmax(scale * q k^T) v.
//
// Three steps, all on the default stream:
//   1. S = scale * q k^T for every sequence: ONE cublasSgemmStridedBatched, the scale folded into alpha.
//   2. S = softmax(S) along each row, in place: one block per row, the row held in registers as float4s.
//   3. out = S v: a second cublasSgemmStridedBatched.
// S is a workspace of B * N * ld floats (ld = N rounded up to 4, so every row starts 16-byte aligned for float4),
// taken from the stream-ordered allocator and given back at the end of the call.
//
// Row-major through column-major cuBLAS (see cublas_gemm): memory holding a row-major R x S matrix with row
// stride ld is, to cuBLAS, the S x R column-major matrix of its transpose, leading dimension ld.
//   step 1: S = q k^T  is  S^T = k q^T; cuBLAS reads k's memory as k^T (d x N), so it transposes it back (OP_T),
//           and reads q's memory as q^T (d x N) as it stands (OP_N): m = N keys, n = N queries, depth d.
//   step 3: out = P v  is  out^T = v^T P^T; both read as stored (OP_N): m = d, n = N queries, depth N keys.
#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

static void ok(cublasStatus_t status, const char* call, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "cublas_attention.cu:%d: %s: %s\n", line, call, cublasGetStatusString(status));
    abort();
}
static void ok(cudaError_t status, const char* call, int line) {
    if (status == cudaSuccess) return;
    fprintf(stderr, "cublas_attention.cu:%d: %s: %s\n", line, call, cudaGetErrorString(status));
    abort();
}
#define OK(call) ok((call), #call, __LINE__)

static cublasHandle_t the_handle() {
    static cublasHandle_t handle = [] {
        cublasHandle_t created;
        OK(cublasCreate(&created));
        return created;
    }();  // created once, on the first call (thread-safe)
    return handle;
}

// Keep freed workspace in the stream-ordered pool: by default the pool hands it back to the driver at every
// synchronisation, and the next call's cudaMallocAsync of up to a GB would pay for it again.
static void keep_freed_workspace() {
    static bool done = [] {
        int device;
        cudaMemPool_t pool;
        uint64_t keep = UINT64_MAX;
        OK(cudaGetDevice(&device));
        OK(cudaDeviceGetDefaultMemPool(&pool, device));
        OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
        return true;
    }();
    (void)done;
}

// --- the softmax: one block per row of S ------------------------------------------------------------

constexpr int kThreads = 256;
constexpr int kMaxVecs = 8;  // float4s per thread held in registers: rows up to 256 * 4 * 8 = 8192 floats

__device__ float weight(float s, float m) { return expf(s - m); }  // the row max subtracted: exp never overflows

// The block's max (is_max) or sum of v, in every thread: shuffles within a warp, then the warps' results
// through shared memory.
__device__ float block_reduce(float v, bool is_max) {
    __shared__ float partial[kThreads / 32];
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // `partial` may still be read by a previous call's last line
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = partial[0];
    for (int w = 1; w < kThreads / 32; ++w) v = is_max ? fmaxf(v, partial[w]) : v + partial[w];
    return v;
}

// The row, read once from global memory into registers (columns past n read as -inf: weight 0), written once.
template <int kVecs>
__global__ void __launch_bounds__(kThreads) softmax_rows(float* S, int n, int ld) {
    float4* row = reinterpret_cast<float4*>(S + (size_t)blockIdx.x * ld);
    float4 x[kVecs];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
        int col = (i * kThreads + threadIdx.x) * 4;
        x[i] = col < n ? row[col / 4] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        if (col + 1 >= n) x[i].y = -INFINITY;  // the padding of the last float4 (ld > n) holds garbage
        if (col + 2 >= n) x[i].z = -INFINITY;
        if (col + 3 >= n) x[i].w = -INFINITY;
        m = fmaxf(m, fmaxf(fmaxf(x[i].x, x[i].y), fmaxf(x[i].z, x[i].w)));
    }
    m = block_reduce(m, true);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
        x[i] = make_float4(weight(x[i].x, m), weight(x[i].y, m), weight(x[i].z, m), weight(x[i].w, m));
        sum += (x[i].x + x[i].y) + (x[i].z + x[i].w);
    }
    float inverse = 1.0f / block_reduce(sum, false);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
        int col = (i * kThreads + threadIdx.x) * 4;
        if (col < n) row[col / 4] = make_float4(x[i].x * inverse, x[i].y * inverse, x[i].z * inverse, x[i].w * inverse);
    }
}

// Rows too long for the registers: three sweeps over global memory (max, sum, write), the row in L2 after the first.
__global__ void __launch_bounds__(kThreads) softmax_long_rows(float* S, int n, int ld) {
    float* row = S + (size_t)blockIdx.x * ld;
    float m = -INFINITY, sum = 0.0f;
    for (int col = threadIdx.x; col < n; col += kThreads) m = fmaxf(m, row[col]);
    m = block_reduce(m, true);
    for (int col = threadIdx.x; col < n; col += kThreads) sum += weight(row[col], m);
    float inverse = 1.0f / block_reduce(sum, false);
    for (int col = threadIdx.x; col < n; col += kThreads) row[col] = weight(row[col], m) * inverse;
}

static void softmax(float* S, int rows, int n, int ld) {
    int vecs = (n + 4 * kThreads - 1) / (4 * kThreads);  // float4s per thread
    if (vecs == 1) softmax_rows<1><<<rows, kThreads>>>(S, n, ld);
    else if (vecs == 2) softmax_rows<2><<<rows, kThreads>>>(S, n, ld);
    else if (vecs <= 4) softmax_rows<4><<<rows, kThreads>>>(S, n, ld);
    else if (vecs <= kMaxVecs) softmax_rows<kMaxVecs><<<rows, kThreads>>>(S, n, ld);
    else softmax_long_rows<<<rows, kThreads>>>(S, n, ld);
    OK(cudaGetLastError());
}

// --- the entry point --------------------------------------------------------------------------------

extern "C" void cublas_attention(const float* q, const float* k, const float* v, float* out, int B, int N, int d,
                                 float scale) {
    cublasHandle_t handle = the_handle();
    keep_freed_workspace();
    const int ld = (N + 3) / 4 * 4;  // S's row stride: each row 16-byte aligned
    const long long qkv_stride = (long long)N * d, s_stride = (long long)N * ld;
    float* S;
    OK(cudaMallocAsync(&S, sizeof(float) * B * s_stride, 0));

    const float zero = 0.0f, one = 1.0f;
    // 1. S^T (N x N, ld) = k (N x d, as k^T read back: OP_T) * q^T (d x N), times alpha = scale
    OK(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, N, d, &scale, k, d, qkv_stride, q, d, qkv_stride,
                                 &zero, S, ld, s_stride, B));
    // 2. each of the B * N rows of S becomes its softmax
    softmax(S, B * N, N, ld);
    // 3. out^T (d x N) = v^T (d x N) * P^T (N x N, ld)
    OK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, d, N, N, &one, v, d, qkv_stride, S, ld, s_stride,
                                 &zero, out, d, qkv_stride, B));
    OK(cudaFreeAsync(S, 0));
}
