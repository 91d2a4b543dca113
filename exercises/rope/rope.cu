// Day 20 — rotary position embedding (RoPE) as a PyTorch operator. Read README.md in this folder.
// Grade with: kcourse grade rope
//
// out = rope(x, cos, sin): x is q (or k) of shape (B, N, H, d), maybe a strided view (a slice of a fused
// qkv tensor) whose last dimension has stride 1; cos and sin are contiguous float32 tables of shape
// (N, d/2); out is a new contiguous tensor like x. Pairs are (i, i + d/2), the rotate_half convention:
//   out[b, n, h, i]       = x1 * cos[n, i] - x2 * sin[n, i]
//   out[b, n, h, i + d/2] = x2 * cos[n, i] + x1 * sin[n, i]     with x1 = x[b, n, h, i], x2 = x[b, n, h, i + d/2]
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

// One thread per pair (i, i + d/2) of one head row (b, n, h); T is float, at::Half or at::BFloat16.
template <typename T>
__global__ void rope_kernel(const T* x, const float* cos_table, const float* sin_table, T* out, long long N,
                            long long H, long long half, long long stride_b, long long stride_n, long long stride_h,
                            long long pairs) {
    // TODO: t = the global thread index; return when t >= pairs (= B * N * H * half).
    // TODO: split t into i = t % half and the head row (b, n, h); use n for the tables, not b * N + n.
    // TODO: read x1 and x2 through x's strides: x + b * stride_b + n * stride_n + h * stride_h (x may not be
    //       contiguous), convert to float (static_cast<float>), rotate with cos_table[n * half + i] and
    //       sin_table[n * half + i], and store both results, cast back to T, into out, which is contiguous:
    //       its row (b, n, h) starts at ((b * N + n) * H + h) * 2 * half.
}

template <typename T>
void launch(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& out) {
    const long long half = x.size(3) / 2;
    const long long pairs = x.size(0) * x.size(1) * x.size(2) * half;
    // TODO: blocks of 256 threads, enough blocks for `pairs` threads, on c10::cuda::getCurrentCUDAStream():
    //       rope_kernel<T><<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<T>(), ...,
    //       x.stride(0), x.stride(1), x.stride(2), pairs);   (strides count elements)
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor rope_cuda(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "rope: x must be a CUDA tensor of shape (B, N, H, d)");
    TORCH_CHECK(x.size(3) % 2 == 0, "rope: the head dimension d must be even (i is paired with i + d/2)");
    TORCH_CHECK(x.stride(3) == 1 || x.size(3) <= 1, "rope: x's last dimension must have stride 1");
    for (const at::Tensor* table : {&cos, &sin}) {
        TORCH_CHECK(table->is_cuda() && table->scalar_type() == at::kFloat && table->is_contiguous() &&
                        table->dim() == 2 && table->size(0) == x.size(1) && table->size(1) == x.size(3) / 2,
                    "rope: cos and sin must be contiguous float32 CUDA tensors of shape (N, d/2)");
    }
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = at::empty(x.sizes(), x.options());  // contiguous, whatever x's strides
    if (out.numel() == 0) return out;
    switch (x.scalar_type()) {
        case at::kFloat: launch<float>(x, cos, sin, out); break;
        case at::kHalf: launch<at::Half>(x, cos, sin, out); break;
        case at::kBFloat16: launch<at::BFloat16>(x, cos, sin, out); break;
        default: TORCH_CHECK(false, "rope: x must be float32, float16 or bfloat16");
    }
    return out;
}

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) { m.def("rope(Tensor x, Tensor cos, Tensor sin) -> Tensor"); }

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("rope", &rope_cuda); }
