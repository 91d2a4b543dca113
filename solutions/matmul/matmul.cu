// Solution — float32 SGEMM with register blocking (SIMT; no tensor cores, since the exercise is float32).
//
// A 256-thread block computes a 128x128 tile of C; each thread an 8x8 sub-block held in registers,
// split in two 4-wide halves 64 apart so a quarter-warp's 16-byte shared-memory reads hit distinct
// banks. K advances 8 at a time through two shared-memory buffers: the next tile's global loads are
// issued before computing on the current one, so memory latency hides behind the FMAs. When K and N
// are multiples of 4 the global loads are 16 bytes wide; otherwise a scalar path handles any shape.
#include <cuda_runtime.h>

constexpr int BM = 128, BN = 128, BK = 8, THREADS = 256;

template <bool VEC>
__global__ void __launch_bounds__(THREADS) sgemm(const float* __restrict__ A, const float* __restrict__ B,
                                                 float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[2][BK][BM];  // A tile, transposed: As[k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[8][8] = {};
    float a_reg[4], b_reg[4];

    auto load_global = [&](int k0) {
        if (VEC) {
            int r = tid / 2, c = (tid % 2) * 4, gr = row0 + r, gc = k0 + c;
            float4 v = (gr < M && gc < K) ? *reinterpret_cast<const float4*>(A + (size_t)gr * K + gc) : make_float4(0, 0, 0, 0);
            a_reg[0] = v.x; a_reg[1] = v.y; a_reg[2] = v.z; a_reg[3] = v.w;
            r = tid / 32; c = (tid % 32) * 4; gr = k0 + r; gc = col0 + c;
            float4 w = (gr < K && gc < N) ? *reinterpret_cast<const float4*>(B + (size_t)gr * N + gc) : make_float4(0, 0, 0, 0);
            b_reg[0] = w.x; b_reg[1] = w.y; b_reg[2] = w.z; b_reg[3] = w.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int e = tid + THREADS * j;
                int r = e / BK, c = e % BK, gr = row0 + r, gc = k0 + c;
                a_reg[j] = (gr < M && gc < K) ? A[(size_t)gr * K + gc] : 0.f;
                r = e / BN; c = e % BN; gr = k0 + r; gc = col0 + c;
                b_reg[j] = (gr < K && gc < N) ? B[(size_t)gr * N + gc] : 0.f;
            }
        }
    };
    auto store_shared = [&](int buf) {
        if (VEC) {
            int r = tid / 2, c = (tid % 2) * 4;
#pragma unroll
            for (int q = 0; q < 4; ++q) As[buf][c + q][r] = a_reg[q];
            r = tid / 32; c = (tid % 32) * 4;
            *reinterpret_cast<float4*>(&Bs[buf][r][c]) = make_float4(b_reg[0], b_reg[1], b_reg[2], b_reg[3]);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int e = tid + THREADS * j;
                As[buf][e % BK][e / BK] = a_reg[j];
                Bs[buf][e / BN][e % BN] = b_reg[j];
            }
        }
    };

    const int tiles = (K + BK - 1) / BK;
    load_global(0);
    store_shared(0);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const int buf = t & 1;
        if (t + 1 < tiles) load_global((t + 1) * BK);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[8], b[8];
            *reinterpret_cast<float4*>(a) = *reinterpret_cast<const float4*>(&As[buf][k][ty * 4]);
            *reinterpret_cast<float4*>(a + 4) = *reinterpret_cast<const float4*>(&As[buf][k][64 + ty * 4]);
            *reinterpret_cast<float4*>(b) = *reinterpret_cast<const float4*>(&Bs[buf][k][tx * 4]);
            *reinterpret_cast<float4*>(b + 4) = *reinterpret_cast<const float4*>(&Bs[buf][k][64 + tx * 4]);
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (t + 1 < tiles) store_shared(buf ^ 1);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (r >= M) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int c = col0 + half * 64 + tx * 4;
            float* dst = C + (size_t)r * N + c;
            if (VEC && c + 3 < N) {
                *reinterpret_cast<float4*>(dst) = make_float4(acc[i][half * 4], acc[i][half * 4 + 1], acc[i][half * 4 + 2], acc[i][half * 4 + 3]);
            } else {
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (c + q < N) dst[q] = acc[i][half * 4 + q];
            }
        }
    }
}

extern "C" void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    if (K % 4 == 0 && N % 4 == 0)
        sgemm<true><<<grid, THREADS>>>(A, B, C, M, N, K);
    else
        sgemm<false><<<grid, THREADS>>>(A, B, C, M, N, K);
}
