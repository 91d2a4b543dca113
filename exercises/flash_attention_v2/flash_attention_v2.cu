// Week 9 (100-day plan: day 14) — Flash Attention 2 forward in CUDA, as a PyTorch operator: out and lse.
//
// out = softmax(q k^T / sqrt(d)) v for q, k, v of shape (B, H, N, d), float16 or bfloat16, d = 64 or 128,
// causal or not, without ever holding the N x N scores — and, for the backward pass, each row's
// log-sum-exp lse = log(sum_j exp(q_i . k_j / sqrt(d))) (natural log, float32). The online softmax has it
// at the end for free: the running max plus the log of the running sum.
// Read README.md first (its CUDA section): the FA2 work partitioning and a ladder from this minimal
// kernel to tensor cores. Grade with: kcourse grade flash_attention_v2 --lang cuda
//
// The host code below is written: it checks the inputs, allocates `out` and `lse`, picks the kernel for the
// dtype, head dimension and causality, and launches one block of kBlockM threads per kBlockM queries of one
// (batch, head). Your job is flash_fwd_kernel (and, later on the ladder, the launch configuration).
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

struct Params {
    Operand q, k, v;
    void* out;         // contiguous (B, H, N, d), allocated by the operator
    float* lse;        // contiguous (B, H, N) float32, allocated by the operator
    int heads, n_ctx;
    float scale_log2;  // log2(e) / sqrt(d): exp(s / sqrt(d)) = exp2(s * scale_log2)
};

constexpr float kLn2 = 0.6931471805599453f;  // log(x) = log2(x) * ln 2
constexpr int kBlockM = 64;  // queries per block: one thread per query row (step 1 of the ladder)
constexpr int kBlockN = 32;  // keys (and values) per shared-memory tile

template <typename T, int D, bool CAUSAL>
__global__ void flash_fwd_kernel(const Params p) {
    // TODO (ladder step 1: flash_attention_v1's minimal kernel, in exp2 units, plus the lse):
    //   __shared__ float k_tile[kBlockN][D], v_tile[kBlockN][D];
    //   row = blockIdx.x * kBlockM + threadIdx.x (this thread's query); blockIdx.y = batch * heads + head
    //   q, k, v of this (batch, head): static_cast<const T*>(p.q.data) + batch * p.q.batch + head * p.q.head;
    //   element (n, c) is at n * p.q.row + c * p.q.col — use the strides, rows are not always d apart
    //   out row `row` starts at static_cast<T*>(p.out) + ((int64_t)blockIdx.y * p.n_ctx + row) * D,
    //   its lse is p.lse[(int64_t)blockIdx.y * p.n_ctx + row]
    //   this row's q times p.scale_log2 (scores then come out in log2 units: exp(s / sqrt(d)) = exp2(q'.k)),
    //   a float32 accumulator acc[D] = 0 in registers; m = -INFINITY, l = 0
    //   for each tile of kBlockN keys (causal: stop after the block's last query, the rest is masked):
    //       __syncthreads(); all threads copy the K and V tile to shared memory as float (rows past
    //       n_ctx: zeros); __syncthreads()
    //       for each key j of the tile that this row sees (j < n_ctx; causal: j <= row):
    //           s = q' . k_j;  m_new = max(m, s);  alpha = exp2f(m - m_new);  p_j = exp2f(s - m_new)
    //           l = l * alpha + p_j;  acc[c] = acc[c] * alpha + p_j * v_j[c];  m = m_new
    //   (threads whose row >= n_ctx still copy tiles and reach every __syncthreads, but store nothing)
    //   out[row][c] = from_float<T>(acc[c] / l)   (FA2: the one division, after the loop)
    //   lse = (m + log2f(l)) * kLn2              (natural log, in units of the scaled scores: the backward
    //                                             rebuilds P = exp(q.k / sqrt(d) - lse) from it)
}

// ---- the operator (written; change the launch configuration as you climb the ladder) -----------------

static cudaStream_t current_stream(const c10::Device& device) {  // what at::cuda::getCurrentCUDAStream() returns
    return static_cast<cudaStream_t>(c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle());
}

template <typename T, int D, bool CAUSAL>
static void launch(const Params& p, int batch_heads, cudaStream_t stream) {
    const dim3 grid((p.n_ctx + kBlockM - 1) / kBlockM, batch_heads);
    flash_fwd_kernel<T, D, CAUSAL><<<grid, kBlockM, 0, stream>>>(p);
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "flash_attention_v2: kernel launch failed: ", cudaGetErrorString(err));
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

static void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    for (const at::Tensor* t : {&q, &k, &v}) {
        TORCH_CHECK(t->is_cuda() && t->device() == q.device(), "flash_attention_v2: q, k and v must be on the same CUDA device");
        TORCH_CHECK(t->dim() == 4 && t->sizes() == q.sizes(),
                    "flash_attention_v2: q, k and v must have the same shape (batch, heads, seq_len, head_dim); got ",
                    q.sizes(), ", ", k.sizes(), ", ", v.sizes());
        TORCH_CHECK(t->scalar_type() == q.scalar_type(), "flash_attention_v2: q, k and v must have the same dtype");
    }
    TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
                "flash_attention_v2: float16 or bfloat16 inputs only; got ", q.scalar_type());
    TORCH_CHECK(q.size(3) == 64 || q.size(3) == 128, "flash_attention_v2: head_dim 64 or 128 only; got ", q.size(3));
    TORCH_CHECK(q.size(0) * q.size(1) <= 65535, "flash_attention_v2: batch * heads must be at most 65535 (the grid's y limit)");
    TORCH_CHECK(q.size(2) < (1 << 30), "flash_attention_v2: seq_len must be below 2^30");
}

std::tuple<at::Tensor, at::Tensor> flash_attention_v2_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                            bool causal) {
    check_inputs(q, k, v);
    const c10::DeviceGuard guard(q.device());
    // contiguous; nothing N x N, ever: out, and 4 bytes a row for lse
    at::Tensor out = at::empty(q.sizes(), q.options());
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    if (q.numel() == 0) return {out, lse};
    const Params p{operand(q), operand(k), operand(v), out.mutable_data_ptr(), lse.mutable_data_ptr<float>(),
                   static_cast<int>(q.size(1)), static_cast<int>(q.size(2)),
                   static_cast<float>(1.4426950408889634 / std::sqrt(double(q.size(3))))};
    const int batch_heads = static_cast<int>(q.size(0) * q.size(1));
    const cudaStream_t stream = current_stream(q.device());
    if (q.scalar_type() == at::kHalf)
        dispatch<__half>(p, q.size(3), causal, batch_heads, stream);
    else
        dispatch<__nv_bfloat16>(p, q.size(3), causal, batch_heads, stream);
    return {out, lse};
}

// The operator: torch.ops.<extension>.flash_attention_v2(q, k, v, causal) -> (out, lse)
TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
    m.def("flash_attention_v2(Tensor q, Tensor k, Tensor v, bool causal) -> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("flash_attention_v2", &flash_attention_v2_cuda); }
