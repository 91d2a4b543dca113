// <mma.h> on the CPU: nvcuda::wmma's warp-wide matrix products, run by kcourse_cuda_cpu.h's warps.
//
// CUDA leaves a fragment's element layout unspecified (only element-wise code may touch x[]), so here lane l holds
// elements l * E .. l * E + E - 1 of the fragment's matrix in row-major order (E = rows * cols / 32); a 16-bit a or
// b fragment holds them twice, as a GPU's 16 elements a lane do. load_matrix_sync and store_matrix_sync touch only
// the lane's own elements, through the learner's pointer (AddressSanitizer checks them). mma_sync is warp-wide
// (kcuda::in_warp): every lane hands its a and b over, computes its own elements of d from the other lanes' rows and
// columns, and writes them once every lane has read (d may be c). Products and sums in float, in k order: a GPU's
// tensor cores add in their own order, the same to within float rounding.
#pragma once
#include "kcourse_cuda_cpu.h"
#include "cuda_bf16.h"  // as CUDA's mma.h, which brings both 16-bit types
#include "cuda_fp16.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct kcuda_shape;  // the rows and columns of a fragment's matrix
template <int M, int N, int K> struct kcuda_shape<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct kcuda_shape<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct kcuda_shape<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static_assert(K == 16 && M * N == 256 && (M == 16 || M == 32 || M == 8),
                  "kcourse's CUDA emulator runs wmma's 16-bit shapes only: m16n16k16, m32n8k16, m8n32k16");
    using element_type = T;
    using storage_element_type = T;
    static constexpr int rows = kcuda_shape<Use, M, N, K>::rows, cols = kcuda_shape<Use, M, N, K>::cols;
    static constexpr int per_lane = rows * cols / 32;
    static constexpr int num_elements = std::is_same_v<Use, accumulator> ? per_lane : 2 * per_lane;
    T x[num_elements];
};

// Where element i of `lane`'s fragment sits in the fragment's matrix.
template <class F>
inline void kcuda_position(int lane, int i, int& row, int& col) {
    const int at = lane * F::per_lane + i % F::per_lane;
    row = at / F::cols;
    col = at % F::cols;
}

inline int kcuda_lane() { return (int)(::kcuda::me().linear & 31); }

template <class Use, int M, int N, int K, class T, class Layout, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& value) {
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = T(value);
}

// a or b from memory, laid out as the fragment's Layout says (leading dimension ldm, in elements)
template <class Use, int M, int N, int K, class T, class Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
    static_assert(!std::is_same_v<Layout, void>, "an a or b fragment names its layout (wmma::row_major or col_major)");
    using F = fragment<Use, M, N, K, T, Layout>;
    const int lane = kcuda_lane();
    for (int i = 0; i < F::num_elements; ++i) {
        int r, c;
        kcuda_position<F>(lane, i, r, c);
        f.x[i] = std::is_same_v<Layout, row_major> ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout) {
    using F = fragment<accumulator, M, N, K, T>;
    const int lane = kcuda_lane();
    for (int i = 0; i < F::num_elements; ++i) {
        int r, c;
        kcuda_position<F>(lane, i, r, c);
        f.x[i] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
    using F = fragment<accumulator, M, N, K, T>;
    const int lane = kcuda_lane();
    for (int i = 0; i < F::num_elements; ++i) {
        int r, c;
        kcuda_position<F>(lane, i, r, c);
        (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[i];
    }
}

// 16-bit values as floats without the (instrumented) conversion operators: a lane reads 144 of them a call.
KCUDA_UNHOOKED inline float kcuda_float_of(__half h) { return kcuda_half_to_float(h.__x); }
KCUDA_UNHOOKED inline float kcuda_float_of(__nv_bfloat16 b) { return kcuda_bf16_to_float(b.__x); }
template <class T>
KCUDA_UNHOOKED inline float kcuda_float_of(T value) {
    return (float)value;
}

// This lane's elements of a b + c, from the fragments every lane of the warp handed over. They lie in one row r of
// c, columns c0 .. c0 + per_lane - 1 (per_lane divides a row's length in every shape), so the lane reads row r of a
// and those columns of b: (1 + per_lane) K values, each where kcuda_position put it.
template <class FA, class FB, class FC>
KCUDA_UNHOOKED inline void kcuda_product(float* out, const FC& c, const ::kcuda::Thread* warp, int lane) {
    constexpr int K = FA::cols;
    const int first = lane * FC::per_lane, r = first / FC::cols, c0 = first % FC::cols;
    float a_row[K], b_cols[K][FC::per_lane];
    for (int k = 0; k < K; ++k) {
        const int at = r * K + k;
        const FA& fa = *static_cast<const FA*>(static_cast<const void* const*>(warp[at / FA::per_lane].fragments)[0]);
        a_row[k] = kcuda_float_of(fa.x[at % FA::per_lane]);
        for (int j = 0; j < FC::per_lane; ++j) {
            const int bt = k * FB::cols + c0 + j;
            const FB& fb = *static_cast<const FB*>(static_cast<const void* const*>(warp[bt / FB::per_lane].fragments)[1]);
            b_cols[k][j] = kcuda_float_of(fb.x[bt % FB::per_lane]);
        }
    }
    for (int j = 0; j < FC::per_lane; ++j) {
        float sum = kcuda_float_of(c.x[j]);
        for (int k = 0; k < K; ++k) sum = fmaf(a_row[k], b_cols[k][j], sum);
        out[j] = sum;
    }
}

template <int M, int N, int K, class TA, class TB, class LA, class LB, class TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c) {
    using FC = fragment<accumulator, M, N, K, TC>;
    const void* mine[2] = {&a, &b};
    float out[FC::per_lane];
    ::kcuda::in_warp("wmma::mma_sync", mine, [&](const ::kcuda::Thread* warp, int lane) {
        kcuda_product<fragment<matrix_a, M, N, K, TA, LA>, fragment<matrix_b, M, N, K, TB, LB>>(out, c, warp, lane);
    });
    for (int i = 0; i < FC::per_lane; ++i) d.x[i] = TC(out[i]);  // d may be c: written once every lane has read
}

}  // namespace wmma
}  // namespace nvcuda
