// Solution — a fused AdamW step in CUDA: p, g, m, v read once, p, m, v written once (28 bytes a parameter).
//
// Everything that is the same for every element (the bias corrections, lr / (1 - beta1^t), 1 - lr·wd) is
// computed once on the host, in double, so each thread does only the per-element work: two fused
// multiply-adds for the moments, a square root, a division and the update. The kernel is a grid-stride loop
// over float4 slots (16-byte loads and stores of all four arrays) when every pointer is 16-byte aligned,
// one wave of blocks sized to the GPU; the last n % 4 elements (or all of them, for misaligned pointers)
// take the scalar path. p, m and v are read and written at the same index by the same thread, so updating
// them in place needs no synchronisation.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

constexpr int THREADS = 256;
// 6 x 256 threads an SM (75% of an H100's 2048): up to 40 registers a thread, which four float4 of p, g, m, v,
// the pointers and the step's constants need (at 32, for a full SM, they spill); 1536 threads with 64 bytes in
// flight each are far more than an SM needs to keep its share of HBM busy
constexpr int BLOCKS_PER_SM = 6;

// The per-step constants, folded on the host.
struct Step {
    float beta1, one_minus_beta1, beta2, one_minus_beta2;
    float eps;
    float decay;           // 1 - lr * weight_decay: decoupled weight decay shrinks p itself
    float step_size;       // lr / (1 - beta1^t): m_hat = m / (1 - beta1^t) folded into the step
    float inv_sqrt_bc2;    // 1 / sqrt(1 - beta2^t): sqrt(v_hat) = sqrt(v) / sqrt(1 - beta2^t)
};

__device__ __forceinline__ void adamw_update(float& p, float g, float& m, float& v, const Step& s) {
    m = fmaf(s.beta1, m, s.one_minus_beta1 * g);
    v = fmaf(s.beta2, v, s.one_minus_beta2 * g * g);
    const float denom = fmaf(sqrtf(v), s.inv_sqrt_bc2, s.eps);  // sqrt(v_hat) + eps: eps outside the root
    // __fdividef: within 2 ulp for a denominator in [2^-126, 2^126] (denom >= eps is), without the IEEE
    // division's slow path, whose registers would spill at 40 a thread
    p = p * s.decay - __fdividef(s.step_size * m, denom);
}

__device__ __forceinline__ void adamw_update4(float4& p, float4 g, float4& m, float4& v, const Step& s) {
    adamw_update(p.x, g.x, m.x, v.x, s);
    adamw_update(p.y, g.y, m.y, v.y, s);
    adamw_update(p.z, g.z, m.z, v.z, s);
    adamw_update(p.w, g.w, m.w, v.w, s);
}

// All four arrays 16-byte aligned: float4 slots over a grid-stride loop, then the n % 4 tail.
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM)
adamw_float4(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
             long long n, Step s) {
    const long long slots = n / 4;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float4* p4 = reinterpret_cast<float4*>(p);
    float4* m4 = reinterpret_cast<float4*>(m);
    float4* v4 = reinterpret_cast<float4*>(v);
    const float4* g4 = reinterpret_cast<const float4*>(g);
    for (long long i = first; i < slots; i += stride) {
        float4 pi = p4[i], mi = m4[i], vi = v4[i];
        const float4 gi = __ldg(g4 + i);  // all four loads issued before any is used
        adamw_update4(pi, gi, mi, vi, s);
        p4[i] = pi;
        m4[i] = mi;
        v4[i] = vi;
    }
    const long long tail = 4 * slots + first;  // at most 3 elements, one thread each
    if (tail < n) adamw_update(p[tail], __ldg(g + tail), m[tail], v[tail], s);
}

// Any pointer off a 16-byte boundary (a slice of a flat parameter buffer): one element at a time.
__global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM)
adamw_scalar(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
             long long n, Step s) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        adamw_update(p[i], __ldg(g + i), m[i], v[i], s);
    }
}

static bool is_aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

// One wave: as many blocks as fit on the GPU at once, each looping over its share. More would run as a
// second, partial wave (a tail where most SMs idle); fewer would leave SMs without work.
static int wave_blocks() {
    static int blocks = 0;  // looked up once (one device per process)
    if (blocks == 0) {
        int device = 0, sms = 0, per_sm = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, adamw_float4, THREADS, 0);
        blocks = (sms > 0 ? sms : 132) * (per_sm > 0 ? per_sm : 1);
    }
    return blocks;
}

extern "C" void adamw(float* p, const float* g, float* m, float* v, int n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, int step) {
    if (n <= 0) return;
    // in double: 1 - 0.999^2 cancels 3 of float32's 7 digits; pow of a double keeps them
    const double bias_correction1 = 1.0 - std::pow((double)beta1, (double)step);
    const double bias_correction2 = 1.0 - std::pow((double)beta2, (double)step);
    const Step s = {beta1,
                    (float)(1.0 - (double)beta1),
                    beta2,
                    (float)(1.0 - (double)beta2),
                    eps,
                    (float)(1.0 - (double)lr * (double)weight_decay),
                    (float)((double)lr / bias_correction1),
                    (float)(1.0 / std::sqrt(bias_correction2))};
    const bool aligned = is_aligned16(p) && is_aligned16(g) && is_aligned16(m) && is_aligned16(v);
    const long long work = aligned ? (n / 4 > 0 ? n / 4 : 1) : n;  // slots (or elements) to cover
    const long long needed = (work + THREADS - 1) / THREADS;
    const int blocks = (int)(needed < wave_blocks() ? needed : wave_blocks());
    if (aligned) adamw_float4<<<blocks, THREADS>>>(p, g, m, v, n, s);
    else adamw_scalar<<<blocks, THREADS>>>(p, g, m, v, n, s);
}
