// Solution — separable box blur near the memory roofline.
//
// A block owns a tile of TW columns x TH rows of outputs. It loads the input rectangle around the tile —
// r more rows above and below, HALO more columns left and right (HALO = r rounded up to a multiple of 4, so
// every row of the rectangle starts on a float4), zeros outside the image — into shared memory with float4
// loads (a batch of them issued before the first is stored), sums each of its rows over the window (row
// pass, into a second shared array), then each column (column pass), and multiplies by 1 / the number of
// in-image pixels, a product of a row count and a column count, so the border rule separates too.
//
// The radius is a template parameter (r = 0 .. 16), so every loop unrolls and no tap is wasted, and both
// passes slide their window: a thread sums the first output's 2r + 1 values, then each next output is the
// last one plus the value entering the window minus the one leaving it — about 2 adds an output instead of
// 2r + 1, restarted every 4 outputs (no drift). The row pass sums 4 outputs of a row from 4 + 2 HALO values
// (float4 reads, no bank conflicts); the column pass 4 rows of 4 neighbouring columns as float4s, stored as
// float4. Outputs whose whole square lies inside the image (all but a band r wide along the border) scale
// by the constant 1 / (2r + 1)^2 instead of dividing. Bytes moved: 4 H W read (the halos come from L2: neighbouring tiles
// read them too), 4 H W written.
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef TW       // `kcourse tune blur` rebuilds with every combination of [tuning.cuda] in spec.toml
#define TW 128   // tile width in outputs, a multiple of 4
#endif
#ifndef TH
#define TH 32    // tile height in outputs, a multiple of 4
#endif
#ifndef THREADS
#define THREADS 256
#endif

constexpr int RUN = 4;      // outputs a thread sums in one window: 4 of a row, or 4 rows of a float4 of columns
constexpr int MAX_R = 16;
constexpr int LOAD_BATCH = 8;  // float4 loads in flight per thread before they are stored
static_assert(TW % 4 == 0 && TH % RUN == 0, "TW and TH: multiples of 4");

template <int R>
struct Tile {
    static constexpr int HALO = (R + 3) / 4 * 4;
    static constexpr int SW = TW + 2 * HALO;  // input rectangle: SH x SW, a row a whole number of float4s
    static constexpr int SH = TH + 2 * R;
    static constexpr int SMEM = (SH * SW + SH * TW) * (int)sizeof(float);  // the input, then its row sums
    static constexpr float INTERIOR_SCALE = 1.f / (float)((2 * R + 1) * (2 * R + 1));
};

__device__ __forceinline__ float4 operator+(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ float4 operator-(float4 a, float4 b) { return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w); }
__device__ __forceinline__ float4 operator*(float4 a, float s) { return make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }

// in_s[i][j] = img[y0 - R + i][x0 - HALO + j], 0 outside the image.
template <int R>
__device__ __forceinline__ void load_tile(const float* __restrict__ img, int H, int W, int x0, int y0, bool vec, float* in_s) {
    using T = Tile<R>;
    const int tid = threadIdx.x;
    if (vec) {  // W % 4 == 0 and img aligned: a float4 chunk is wholly inside the image or wholly outside
        constexpr int CHUNKS = T::SH * T::SW / 4;
        constexpr int PER = (CHUNKS + THREADS - 1) / THREADS;
#pragma unroll
        for (int b = 0; b < PER; b += LOAD_BATCH) {
            float4 v[LOAD_BATCH];
#pragma unroll
            for (int q = 0; q < LOAD_BATCH; ++q) {
                const int c = tid + (b + q) * THREADS;
                const int i = c / (T::SW / 4), j = (c % (T::SW / 4)) * 4;
                const int y = y0 - R + i, x = x0 - T::HALO + j;
                v[q] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (b + q < PER && c < CHUNKS && y >= 0 && y < H && x >= 0 && x < W)
                    v[q] = __ldg(reinterpret_cast<const float4*>(img + (long long)y * W + x));
            }
#pragma unroll
            for (int q = 0; q < LOAD_BATCH; ++q) {
                const int c = tid + (b + q) * THREADS;
                if (b + q < PER && c < CHUNKS) reinterpret_cast<float4*>(in_s)[c] = v[q];
            }
        }
    } else {
        for (int c = tid; c < T::SH * T::SW; c += THREADS) {
            const int i = c / T::SW, j = c % T::SW;
            const int y = y0 - R + i, x = x0 - T::HALO + j;
            in_s[c] = (y >= 0 && y < H && x >= 0 && x < W) ? img[(long long)y * W + x] : 0.f;
        }
    }
}

// rows_s[i][c] = sum of in_s[i][c + HALO - R .. c + HALO + R]: RUN outputs from one window of RUN + 2 HALO.
template <int R>
__device__ __forceinline__ void row_pass(const float* in_s, float* rows_s) {
    using T = Tile<R>;
    constexpr int FIRST = T::HALO - R;  // the window's first tap of the run's first output
    for (int item = threadIdx.x; item < T::SH * (TW / RUN); item += THREADS) {
        const int i = item / (TW / RUN), c = (item % (TW / RUN)) * RUN;
        float win[RUN + 2 * T::HALO];
#pragma unroll
        for (int q = 0; q < (RUN + 2 * T::HALO) / 4; ++q) {
            const float4 v = *reinterpret_cast<const float4*>(&in_s[i * T::SW + c + 4 * q]);
            win[4 * q] = v.x, win[4 * q + 1] = v.y, win[4 * q + 2] = v.z, win[4 * q + 3] = v.w;
        }
        float sum = 0.f, acc[RUN];
#pragma unroll
        for (int k = 0; k <= 2 * R; ++k) sum += win[FIRST + k];
        acc[0] = sum;
#pragma unroll
        for (int q = 1; q < RUN; ++q) acc[q] = R == 0 ? win[FIRST + q] : sum += win[FIRST + 2 * R + q] - win[FIRST + q - 1];
        *reinterpret_cast<float4*>(&rows_s[i * TW + c]) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
}

__device__ __forceinline__ int in_image(int p, int r, int size) { return min(p + r, size - 1) - max(p - r, 0) + 1; }

// out[y0 + i][x0 + c .. c + 3] = sum of rows_s[i .. i + 2R][c .. c + 3] / count, for RUN rows i.
template <int R>
__device__ __forceinline__ void column_pass(const float* rows_s, float* __restrict__ out, int H, int W, int x0, int y0, bool vec) {
    using T = Tile<R>;
    const float4* rows4 = reinterpret_cast<const float4*>(rows_s);
    for (int item = threadIdx.x; item < (TW / 4) * (TH / RUN); item += THREADS) {
        const int g = item % (TW / 4), i0 = (item / (TW / 4)) * RUN;  // a warp takes neighbouring float4s of a row
        const int x = x0 + 4 * g, y = y0 + i0;
        if (x >= W || y >= H) continue;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f), acc[RUN];
#pragma unroll
        for (int k = 0; k <= 2 * R; ++k) sum = sum + rows4[(i0 + k) * (TW / 4) + g];
        acc[0] = sum;
#pragma unroll
        for (int q = 1; q < RUN; ++q)  // r = 0: the identity, no sliding
            acc[q] = R == 0 ? rows4[(i0 + q) * (TW / 4) + g]
                            : sum = sum + (rows4[(i0 + q + 2 * R) * (TW / 4) + g] - rows4[(i0 + q - 1) * (TW / 4) + g]);
        const bool interior = y - R >= 0 && y + RUN - 1 + R < H && x - R >= 0 && x + 3 + R < W;
        if (vec && interior) {
#pragma unroll
            for (int q = 0; q < RUN; ++q)
                *reinterpret_cast<float4*>(out + (long long)(y + q) * W + x) = acc[q] * T::INTERIOR_SCALE;
        } else {  // near a border (or a width that is not a multiple of 4): count each output's pixels
#pragma unroll
            for (int q = 0; q < RUN; ++q) {
                if (y + q >= H) break;
                const int rows = in_image(y + q, R, H);
                const float a[4] = {acc[q].x, acc[q].y, acc[q].z, acc[q].w};
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    if (x + k < W) out[(long long)(y + q) * W + x + k] = a[k] / (float)(rows * in_image(x + k, R, W));
            }
        }
    }
}

template <int R>
__global__ void __launch_bounds__(THREADS) blur_tile(const float* __restrict__ img, float* __restrict__ out, int H, int W, bool vec) {
    extern __shared__ __align__(16) float smem[];
    float* in_s = smem;                                   // SH x SW
    float* rows_s = smem + Tile<R>::SH * Tile<R>::SW;     // SH x TW
    const int x0 = blockIdx.x * TW, y0 = blockIdx.y * TH;
    load_tile<R>(img, H, W, x0, y0, vec, in_s);
    __syncthreads();
    row_pass<R>(in_s, rows_s);
    __syncthreads();
    column_pass<R>(rows_s, out, H, W, x0, y0, vec);
}

// Any radius: one thread per output, the cut square read through the cache. Only for r > MAX_R (not graded).
__global__ void blur_plain(const float* __restrict__ img, float* __restrict__ out, int H, int W, int r) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    const int ya = max(y - r, 0), yb = min(y + r, H - 1), xa = max(x - r, 0), xb = min(x + r, W - 1);
    float sum = 0.f;
    for (int yy = ya; yy <= yb; ++yy)
        for (int xx = xa; xx <= xb; ++xx) sum += img[(long long)yy * W + xx];
    out[(long long)y * W + x] = sum / (float)((yb - ya + 1) * (xb - xa + 1));
}

template <int R>
static void launch(const float* img, float* out, int H, int W, bool vec) {
    static bool opted_in = false;  // shared memory past 48 KB must be asked for, once per kernel
    if (!opted_in) {
        cudaFuncSetAttribute(blur_tile<R>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile<R>::SMEM);
        opted_in = true;
    }
    const dim3 grid((W + TW - 1) / TW, (H + TH - 1) / TH);
    blur_tile<R><<<grid, THREADS, Tile<R>::SMEM>>>(img, out, H, W, vec);
}

template <int R>
static void launch_radius(int r, const float* img, float* out, int H, int W, bool vec) {
    if constexpr (R <= MAX_R) {
        if (r == R) launch<R>(img, out, H, W, vec);
        else launch_radius<R + 1>(r, img, out, H, W, vec);
    }
}

extern "C" void blur(const float* img, float* out, int H, int W, int r) {
    if (H <= 0 || W <= 0) return;
    if (r > MAX_R) {
        blur_plain<<<dim3((W + 31) / 32, (H + 7) / 8), dim3(32, 8)>>>(img, out, H, W, r);
        return;
    }
    const bool vec = W % 4 == 0 && ((reinterpret_cast<uintptr_t>(img) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    launch_radius<0>(max(r, 0), img, out, H, W, vec);
}
