// Weeks 7-8 (100-day plan: days 9-10) — Flash Attention forward in CUDA, as a PyTorch operator.
//
// out = softmax(q k^T / sqrt(d)) v for q, k, v of shape (B, H, N, d), float16 or bfloat16, d = 64 or 128,
// causal or not, without ever holding the N x N scores: each block of queries streams the keys and
// values through shared memory and keeps a running max and sum per row (the online softmax, in float32).
// Read README.md first: it has the algorithm and a ladder from this minimal kernel to tensor cores.
// Grade with: kcourse grade flash_attention_v1 --lang cuda
//
// The host code below is written: it checks the inputs, allocates `out`, picks the kernel for the dtype,
// head dimension and causality, and launches one block of kBlockM threads per kBlockM queries of one
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

// torch's extension builder turns off the implicit float <-> half conversions: convert explicitly
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

struct Operand {  // one (B, H, N, d) input: its data and its four strides, in elements
    const void* data;
    int64_t batch, head, row, col;
};

struct Params {
    Operand q, k, v;
    void* out;         // contiguous (B, H, N, d), allocated by the operator
    int heads, n_ctx;
    float scale;       // 1 / sqrt(d)
};

constexpr int kBlockM = 64;  // queries per block: one thread per query row (step 1 of the ladder)
constexpr int kBlockN = 32;  // keys (and values) per shared-memory tile

template <typename T, int D, bool CAUSAL>
__global__ void flash_fwd_kernel(const Params p) {
    // TODO (ladder step 1, the flash-attention-minimal design):
    //   __shared__ float k_tile[kBlockN][D], v_tile[kBlockN][D];
    //   row = blockIdx.x * kBlockM + threadIdx.x (this thread's query); blockIdx.y = batch * heads + head
    //   q, k, v of this (batch, head): static_cast<const T*>(p.q.data) + batch * p.q.batch + head * p.q.head;
    //   element (n, c) is at n * p.q.row + c * p.q.col — use the strides, rows are not always d apart
    //   out row `row` starts at static_cast<T*>(p.out) + ((int64_t)blockIdx.y * p.n_ctx + row) * D
    //   this row's q (times p.scale) and a float32 accumulator acc[D] = 0 in registers; m = -INFINITY, l = 0
    //   for each tile of kBlockN keys (causal: stop after the block's last query, the rest is masked):
    //       __syncthreads(); all threads copy the K and V tile to shared memory as float (rows past
    //       n_ctx: zeros); __syncthreads()
    //       for each key j of the tile that this row sees (j < n_ctx; causal: j <= row):
    //           s = q . k_j;  m_new = max(m, s);  alpha = expf(m - m_new);  p_j = expf(s - m_new)
    //           l = l * alpha + p_j;  acc[c] = acc[c] * alpha + p_j * v_j[c];  m = m_new
    //   (threads whose row >= n_ctx still copy tiles and reach every __syncthreads, but store nothing)
    //   out[row][c] = from_float<T>(acc[c] / l)
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
    TORCH_CHECK(err == cudaSuccess, "flash_attention: kernel launch failed: ", cudaGetErrorString(err));
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
        TORCH_CHECK(t->is_cuda() && t->device() == q.device(), "flash_attention: q, k and v must be on the same CUDA device");
        TORCH_CHECK(t->dim() == 4 && t->sizes() == q.sizes(),
                    "flash_attention: q, k and v must have the same shape (batch, heads, seq_len, head_dim); got ",
                    q.sizes(), ", ", k.sizes(), ", ", v.sizes());
        TORCH_CHECK(t->scalar_type() == q.scalar_type(), "flash_attention: q, k and v must have the same dtype");
    }
    TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
                "flash_attention: float16 or bfloat16 inputs only; got ", q.scalar_type());
    TORCH_CHECK(q.size(3) == 64 || q.size(3) == 128, "flash_attention: head_dim 64 or 128 only; got ", q.size(3));
    TORCH_CHECK(q.size(0) * q.size(1) <= 65535, "flash_attention: batch * heads must be at most 65535 (the grid's y limit)");
    TORCH_CHECK(q.size(2) < (1 << 30), "flash_attention: seq_len must be below 2^30");
}

at::Tensor flash_attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
    check_inputs(q, k, v);
    const c10::DeviceGuard guard(q.device());
    at::Tensor out = at::empty(q.sizes(), q.options());  // contiguous; nothing N x N, ever
    if (q.numel() == 0) return out;
    const Params p{operand(q), operand(k), operand(v), out.mutable_data_ptr(), static_cast<int>(q.size(1)),
                   static_cast<int>(q.size(2)), static_cast<float>(1.0 / std::sqrt(double(q.size(3))))};
    const int batch_heads = static_cast<int>(q.size(0) * q.size(1));
    const cudaStream_t stream = current_stream(q.device());
    if (q.scalar_type() == at::kHalf)
        dispatch<__half>(p, q.size(3), causal, batch_heads, stream);
    else
        dispatch<__nv_bfloat16>(p, q.size(3), causal, batch_heads, stream);
    return out;
}

// The operator: torch.ops.<extension>.flash_attention(q, k, v, causal) -> out
TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) { m.def("flash_attention(Tensor q, Tensor k, Tensor v, bool causal) -> Tensor"); }

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("flash_attention", &flash_attention_cuda); }
