// Week 9 (100-day plan: days 11, 14 and 16) — Flash Attention 2 backward in CUDA, as a PyTorch operator.
//
// dq, dk, dv of out = softmax(q k^T / sqrt(d)) v for q, k, v of shape (B, H, N, d), float16 or bfloat16,
// d = 64 or 128, causal or not, from what the forward saved (out, and lse: each row's natural-log
// log-sum-exp of the scaled scores, float32 (B, H, N)) and dout, the loss's gradient with respect to out:
//
//     P = exp(S - lse)   dV = P^T dO   dP = dO V^T   delta = rowsum(dO * O)   dS = P * (dP - delta)
//     dQ = dS K / sqrt(d)   dK = dS^T Q / sqrt(d)        (S = Q K^T / sqrt(d); causal: P = 0 above the diagonal)
//
// without ever holding an N x N matrix. Read README.md first (its CUDA section): the derivation, the
// kernels' structure and a ladder from these CUDA-core kernels to tensor cores.
// Grade with: kcourse grade flash_attention_v2_backward --lang cuda
//
// The host code below is written: it checks the inputs, allocates dq, dk, dv and the float32 delta
// buffer, and launches three kernels on one stream, in this order: delta (one thread per query row),
// dQ (one block of kRows threads per kRows queries: one thread per query row) and dK/dV (one block of
// kRows threads per kRows keys: one thread per key row), each grid (cdiv(N, kRows), B * H).
// Your job is the three kernels (and, later on the ladder, the launch configuration).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <tuple>

// torch's extension builder turns off the implicit float <-> half conversions: convert explicitly
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// ---- the kernel ------------------------------------------------------------------------------------

struct Operand {  // one (B, H, N, d) input: its data and its four strides, in elements
    const void* data;
    int64_t batch, head, row, col;
};

struct RowStats {  // the forward's lse, (B, H, N) float32: its data and its three strides
    const float* data;
    int64_t batch, head, row;
};

struct Params {
    Operand q, k, v, out, dout;
    RowStats lse;
    float* delta;        // contiguous (B, H, N) float32 scratch, allocated by the operator: the delta kernel writes it
    void *dq, *dk, *dv;  // contiguous (B, H, N, d), allocated by the operator
    int heads, n_ctx;
    float scale;         // 1 / sqrt(d)
    float scale_log2;    // log2(e) / sqrt(d): exp(s / sqrt(d) - lse) = exp2(s * scale_log2 - lse * log2(e))
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kRows = 64;  // rows a block owns: one thread per query (dQ) or per key (dK/dV) (step 1 of the ladder)
constexpr int kTile = 32;  // rows of the tiles the block streams through shared memory

// 1. delta[b, h, i] = sum_c dO[b, h, i, c] * O[b, h, i, c], in float32
template <typename T, int D>
__global__ void flash_bwd_delta_kernel(const Params p) {
    // TODO: row = blockIdx.x * kRows + threadIdx.x, blockIdx.y = batch * heads + head; rows past n_ctx do nothing.
    //   out and dout of this (batch, head): static_cast<const T*>(p.out.data) + batch * p.out.batch + head * p.out.head;
    //   element (n, c) is at n * p.out.row + c * p.out.col — use the strides, rows are not always d apart.
    //   p.delta[(int64_t)blockIdx.y * p.n_ctx + row] = the sum, accumulated in float32 (half precision cancels).
}

// 2. dQ: one thread per query row i, walking the keys in tiles of kTile
template <typename T, int D, bool CAUSAL>
__global__ void flash_bwd_dq_kernel(const Params p) {
    // TODO (ladder step 1):
    //   __shared__ float k_tile[kTile][D], v_tile[kTile][D];
    //   row = blockIdx.x * kRows + threadIdx.x (this thread's query); q, k, v, dout as in the delta kernel;
    //   lse of the row: p.lse.data[batch * p.lse.batch + head * p.lse.head + row * p.lse.row]
    //   in registers: q_row[c] = q[row][c] * p.scale_log2 (scores in log2 units), do_row[c] = dout[row][c],
    //   dq[c] = 0; lse2 = lse * kLog2e (the same units); delta_i = p.delta[...row]
    //   for each tile of kTile keys (causal: stop after the block's last query):
    //       __syncthreads(); all threads copy the K and V tile to shared memory as float (rows past n_ctx: zeros);
    //       __syncthreads()
    //       for each key j of the tile this row sees (j < n_ctx; causal: j <= row):
    //           s = q_row . k_j;  p_ij = exp2f(s - lse2)      (the softmax, rebuilt: no max, no sum)
    //           dp = do_row . v_j;  ds = p_ij * (dp - delta_i);  dq[c] += ds * k_j[c]
    //   (threads whose row >= n_ctx still copy tiles and reach every __syncthreads, but store nothing)
    //   dq row `row` starts at static_cast<T*>(p.dq) + ((int64_t)blockIdx.y * p.n_ctx + row) * D:
    //   dq[row][c] = from_float<T>(dq[c] * p.scale)       (dS K / sqrt(d))
}

// 3. dK and dV: one thread per key row j, walking the queries in tiles of kTile
template <typename T, int D, bool CAUSAL>
__global__ void flash_bwd_dkdv_kernel(const Params p) {
    // TODO (ladder step 1):
    //   __shared__ float q_tile[kTile][D], do_tile[kTile][D], lse2_tile[kTile], delta_tile[kTile];
    //   key = blockIdx.x * kRows + threadIdx.x (this thread's key); k_row[c] = k[key][c] * p.scale_log2,
    //   v_row[c] = v[key][c], dk[c] = dv[c] = 0 in registers
    //   for each tile of kTile queries (causal: start at the block's first key, blockIdx.x * kRows: earlier
    //   queries see none of its keys):
    //       __syncthreads(); all threads copy the Q and dO tile as float (rows past n_ctx: zeros) and each
    //       query's lse * kLog2e and delta; __syncthreads()
    //       for each query i of the tile that sees this key (i < n_ctx; causal: i >= key):
    //           s = k_row . q_i;  p_ij = exp2f(s - lse2_i);  dv[c] += p_ij * do_i[c]
    //           dp = v_row . do_i;  ds = p_ij * (dp - delta_i);  dk[c] += ds * q_i[c]
    //   dk[key][c] = from_float<T>(dk[c] * p.scale), dv[key][c] = from_float<T>(dv[c])  (rows below n_ctx only;
    //   static_cast<T*>(p.dk) + ((int64_t)blockIdx.y * p.n_ctx + key) * D, likewise p.dv)
}

// ---- the operator (written; change the launch configuration as you climb the ladder) -----------------

static cudaStream_t current_stream(const c10::Device& device) {  // what at::cuda::getCurrentCUDAStream() returns
    return static_cast<cudaStream_t>(c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle());
}

static void check_launch(const char* what) {
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "flash_attention_v2_backward: ", what, " launch failed: ", cudaGetErrorString(err));
}

template <typename T, int D, bool CAUSAL>
static void launch(const Params& p, int batch_heads, cudaStream_t stream) {
    const dim3 grid((p.n_ctx + kRows - 1) / kRows, batch_heads);
    flash_bwd_delta_kernel<T, D><<<grid, kRows, 0, stream>>>(p);  // first: the other two read delta
    check_launch("delta kernel");
    flash_bwd_dq_kernel<T, D, CAUSAL><<<grid, kRows, 0, stream>>>(p);
    check_launch("dQ kernel");
    flash_bwd_dkdv_kernel<T, D, CAUSAL><<<grid, kRows, 0, stream>>>(p);
    check_launch("dK/dV kernel");
}

template <typename T>
static void dispatch(const Params& p, int64_t head_dim, bool causal, int batch_heads, cudaStream_t stream) {
    if (head_dim == 64)
        causal ? launch<T, 64, true>(p, batch_heads, stream) : launch<T, 64, false>(p, batch_heads, stream);
    else
        causal ? launch<T, 128, true>(p, batch_heads, stream) : launch<T, 128, false>(p, batch_heads, stream);
}

static Operand operand(const at::Tensor& t) {
    return {t.const_data_ptr(), t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

static void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                         const at::Tensor& lse, const at::Tensor& dout) {
    for (const at::Tensor* t : {&q, &k, &v, &out, &dout}) {
        TORCH_CHECK(t->is_cuda() && t->device() == q.device(),
                    "flash_attention_v2_backward: q, k, v, out, lse and dout must be on the same CUDA device");
        TORCH_CHECK(t->dim() == 4 && t->sizes() == q.sizes(),
                    "flash_attention_v2_backward: q, k, v, out and dout must have the same shape (batch, heads, seq_len, "
                    "head_dim); got ", q.sizes(), " and ", t->sizes());
        TORCH_CHECK(t->scalar_type() == q.scalar_type(),
                    "flash_attention_v2_backward: q, k, v, out and dout must have the same dtype");
    }
    TORCH_CHECK(lse.is_cuda() && lse.device() == q.device() && lse.scalar_type() == at::kFloat && lse.dim() == 3 &&
                    lse.size(0) == q.size(0) && lse.size(1) == q.size(1) && lse.size(2) == q.size(2),
                "flash_attention_v2_backward: lse must be float32 of shape (batch, heads, seq_len) on q's device; got ",
                lse.scalar_type(), " ", lse.sizes());
    TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
                "flash_attention_v2_backward: float16 or bfloat16 inputs only; got ", q.scalar_type());
    TORCH_CHECK(q.size(3) == 64 || q.size(3) == 128, "flash_attention_v2_backward: head_dim 64 or 128 only; got ",
                q.size(3));
    TORCH_CHECK(q.size(0) * q.size(1) <= 65535,
                "flash_attention_v2_backward: batch * heads must be at most 65535 (the grid's y limit)");
    TORCH_CHECK(q.size(2) < (1 << 30), "flash_attention_v2_backward: seq_len must be below 2^30");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_v2_backward_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& dout, bool causal) {
    check_inputs(q, k, v, out, lse, dout);
    const c10::DeviceGuard guard(q.device());
    // contiguous outputs; delta: 4 bytes a row of scratch — nothing N x N, ever
    at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(q.sizes(), q.options()),
               dv = at::empty(q.sizes(), q.options());
    if (q.numel() == 0) return {dq, dk, dv};
    at::Tensor delta = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    const double scale = 1.0 / std::sqrt(double(q.size(3)));
    const Params p{operand(q), operand(k), operand(v), operand(out), operand(dout),
                   RowStats{lse.const_data_ptr<float>(), lse.stride(0), lse.stride(1), lse.stride(2)},
                   delta.mutable_data_ptr<float>(), dq.mutable_data_ptr(), dk.mutable_data_ptr(), dv.mutable_data_ptr(),
                   static_cast<int>(q.size(1)), static_cast<int>(q.size(2)), static_cast<float>(scale),
                   static_cast<float>(1.4426950408889634 * scale)};
    const int batch_heads = static_cast<int>(q.size(0) * q.size(1));
    const cudaStream_t stream = current_stream(q.device());
    if (q.scalar_type() == at::kHalf)
        dispatch<__half>(p, q.size(3), causal, batch_heads, stream);
    else
        dispatch<__nv_bfloat16>(p, q.size(3), causal, batch_heads, stream);
    return {dq, dk, dv};
}

// The operator: torch.ops.<extension>.flash_attention_v2_backward(q, k, v, out, lse, dout, causal) -> (dq, dk, dv)
TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
    m.def("flash_attention_v2_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor dout, bool causal) "
          "-> (Tensor dq, Tensor dk, Tensor dv)");
}

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) {
    m.impl("flash_attention_v2_backward", &flash_attention_v2_backward_cuda);
}
