// Solution — rotary position embedding (RoPE), rotate_half convention, as a PyTorch operator.
//
// Memory-bound: x is read once and out written once; the float32 tables (N x d/2, a few MB) stay in
// L1/L2, because the rows a block holds are neighbouring heads of the same token and share a table row.
// Each thread rotates VEC pairs: 16 bytes of each half of one head row (8 bfloat16/float16 or 4 float32),
// where x's pointer and strides allow 16-byte accesses, one pair otherwise. The row's (b, n, h) is
// computed once per thread, in 32-bit arithmetic: 64-bit division for every element costs more issue
// slots than the memory system leaves.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

constexpr int THREADS = 256;

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {  // VEC elements moved by one load or store
    T v[VEC];
};

struct Shape {
    unsigned N, H, half;   // sequence length, heads, d / 2
    unsigned rows;         // B * N * H head rows
    long long sb, sn, sh;  // x's strides in elements (its last dimension has stride 1)
};

// VEC float32 table entries: float4 loads when VEC is a multiple of 4 (aligned whenever x's are, see
// vector_path_ok), plain loads otherwise.
template <int VEC>
__device__ __forceinline__ void load_table(const float* p, float (&t)[VEC]) {
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int j = 0; j < VEC / 4; ++j) {
            const float4 q = reinterpret_cast<const float4*>(p)[j];
            t[4 * j] = q.x;
            t[4 * j + 1] = q.y;
            t[4 * j + 2] = q.z;
            t[4 * j + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) t[k] = p[k];
    }
}

// threadIdx.y picks the block's head row, threadIdx.x walks VEC-wide chunks of its first half; the pair
// (i, i + d/2) is rotated by the angle of (n, i): out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin.
template <typename T, int VEC>
__global__ void __launch_bounds__(THREADS) rope_kernel(const T* __restrict__ x, const float* __restrict__ cos_table,
                                                       const float* __restrict__ sin_table, T* __restrict__ out,
                                                       Shape s) {
    using P = Pack<T, VEC>;
    const unsigned row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= s.rows) return;
    const unsigned h = row % s.H, token = row / s.H;
    const unsigned n = token % s.N, b = token / s.N;
    const T* xr = x + b * s.sb + n * s.sn + h * s.sh;
    T* outr = out + (long long)row * 2 * s.half;  // out is contiguous
    const float* cr = cos_table + (long long)n * s.half;
    const float* sr = sin_table + (long long)n * s.half;
    for (unsigned i = threadIdx.x * VEC; i < s.half; i += blockDim.x * VEC) {
        const P first = *reinterpret_cast<const P*>(xr + i);
        const P second = *reinterpret_cast<const P*>(xr + s.half + i);
        float c[VEC], sn[VEC];
        load_table<VEC>(cr + i, c);
        load_table<VEC>(sr + i, sn);
        P lo, hi;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float x1 = static_cast<float>(first.v[k]), x2 = static_cast<float>(second.v[k]);
            lo.v[k] = static_cast<T>(x1 * c[k] - x2 * sn[k]);  // float32 math, one rounding to T
            hi.v[k] = static_cast<T>(x2 * c[k] + x1 * sn[k]);
        }
        *reinterpret_cast<P*>(outr + i) = lo;
        *reinterpret_cast<P*>(outr + s.half + i) = hi;
    }
}

template <typename T, int VEC>
void launch(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& out, const Shape& s) {
    const unsigned lanes = std::min<unsigned>(s.half / VEC, THREADS);  // threads along half a row
    const unsigned rows_per_block = THREADS / lanes;
    const unsigned blocks = (s.rows + rows_per_block - 1) / rows_per_block;
    rope_kernel<T, VEC><<<blocks, dim3(lanes, rows_per_block), 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<T>(), cos.data_ptr<float>(), sin.data_ptr<float>(), out.data_ptr<T>(), s);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// 16-byte accesses need every row of x, both halves, and both tables' rows on 16-byte boundaries: the
// pointers aligned and d/2 and x's strides multiples of VEC. A slice of a fused qkv tensor usually is; a
// view with an odd stride is not (out is fresh, hence aligned, when d/2 is a multiple of VEC).
bool vector_path_ok(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const Shape& s, int vec) {
    return s.half % vec == 0 && s.sb % vec == 0 && s.sn % vec == 0 && s.sh % vec == 0 && aligned16(x.data_ptr()) &&
           aligned16(cos.data_ptr()) && aligned16(sin.data_ptr());
}

template <typename T>
void rope_launch(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& out, const Shape& s) {
    constexpr int VEC = 16 / sizeof(T);
    if (vector_path_ok(x, cos, sin, s, VEC)) {
        launch<T, VEC>(x, cos, sin, out, s);
    } else {
        launch<T, 1>(x, cos, sin, out, s);
    }
}

void check_tables(const at::Tensor& x, const at::Tensor& table, const char* name) {
    TORCH_CHECK(table.is_cuda() && table.device() == x.device(), "rope: ", name, " must be on x's device");
    TORCH_CHECK(table.scalar_type() == at::kFloat && table.dim() == 2 && table.is_contiguous(), "rope: ", name,
                " must be a contiguous float32 tensor of shape (N, d/2)");
    TORCH_CHECK(table.size(0) == x.size(1) && table.size(1) == x.size(3) / 2, "rope: ", name, " has shape ",
                table.sizes(), "; expected (N, d/2) = (", x.size(1), ", ", x.size(3) / 2, ")");
}

at::Tensor rope_cuda(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "rope: x must be a CUDA tensor of shape (B, N, H, d)");
    TORCH_CHECK(x.size(3) % 2 == 0, "rope: the head dimension d must be even (i is paired with i + d/2)");
    TORCH_CHECK(x.stride(3) == 1 || x.size(3) <= 1, "rope: x's last dimension must have stride 1; call .contiguous() first");
    check_tables(x, cos, "cos");
    check_tables(x, sin, "sin");
    TORCH_CHECK(x.size(0) * x.size(1) * x.size(2) < (1LL << 31), "rope: more than 2^31 head rows: split the batch");
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = at::empty(x.sizes(), x.options());  // contiguous, whatever x's strides
    if (out.numel() == 0) return out;
    const Shape s{(unsigned)x.size(1), (unsigned)x.size(2), (unsigned)(x.size(3) / 2),
                  (unsigned)(x.size(0) * x.size(1) * x.size(2)), x.stride(0), x.stride(1), x.stride(2)};
    switch (x.scalar_type()) {
        case at::kFloat: rope_launch<float>(x, cos, sin, out, s); break;
        case at::kHalf: rope_launch<at::Half>(x, cos, sin, out, s); break;
        case at::kBFloat16: rope_launch<at::BFloat16>(x, cos, sin, out, s); break;
        default: TORCH_CHECK(false, "rope: x must be float32, float16 or bfloat16, not ", x.scalar_type());
    }
    return out;
}

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) { m.def("rope(Tensor x, Tensor cos, Tensor sin) -> Tensor"); }

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("rope", &rope_cuda); }
