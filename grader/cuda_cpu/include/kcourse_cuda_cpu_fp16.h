// __half and __nv_bfloat16 on the CPU (cuda_fp16.h, cuda_bf16.h): 16-bit storage, arithmetic in float, each
// value rounded to nearest even when stored, as a GPU's conversions do.
#pragma once
#include "kcourse_cuda_cpu.h"

inline unsigned short kcuda_float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);  // a NaN stays a (quiet) NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
inline unsigned short kcuda_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds past 65504: infinity
    if (a < 0x38800000u) return (unsigned short)(sign | (uint32_t)nearbyintf(fabsf(f) * 16777216.f));  // subnormal
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13), rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return (unsigned short)(sign | h);
}
// to float: kcourse_cuda_cpu.h's kcuda_half_to_float and kcuda_bf16_to_float (the tensor cores read them too)

#define KCUDA_HALF_TYPE(T, TO, FROM) \
    struct T { \
        unsigned short __x; \
        T() = default; \
        T(float f) : __x(TO(f)) {} \
        T(double d) : __x(TO((float)d)) {} \
        T(int i) : __x(TO((float)i)) {} \
        operator float() const { return FROM(__x); } \
    }; \
    struct T##2 { T x, y; };
KCUDA_HALF_TYPE(__half, kcuda_float_to_half, kcuda_half_to_float)
KCUDA_HALF_TYPE(__nv_bfloat16, kcuda_float_to_bf16, kcuda_bf16_to_float)
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return (float)h; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return __half2{__half(a), __half(a)}; }
inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
inline __half2 __float22half2_rn(float2 f) { return __half2{__half(f.x), __half(f.y)}; }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return (float)b; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(a)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{(float)h.x, (float)h.y}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __nv_bfloat162{__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }

// the element-wise functions, for both types and their pairs
#define KCUDA_HALF_OPS(T) \
    inline float __low2float(T##2 h) { return (float)h.x; } \
    inline float __high2float(T##2 h) { return (float)h.y; } \
    inline T __hadd(T a, T b) { return T((float)a + (float)b); } \
    inline T __hsub(T a, T b) { return T((float)a - (float)b); } \
    inline T __hmul(T a, T b) { return T((float)a * (float)b); } \
    inline T __hdiv(T a, T b) { return T((float)a / (float)b); } \
    inline T __hfma(T a, T b, T c) { return T(fmaf((float)a, (float)b, (float)c)); } \
    inline T __hneg(T a) { return T(-(float)a); } \
    inline T __habs(T a) { return T(fabsf((float)a)); } \
    inline T __hmax(T a, T b) { return T(fmaxf((float)a, (float)b)); } \
    inline T __hmin(T a, T b) { return T(fminf((float)a, (float)b)); } \
    inline bool __hlt(T a, T b) { return (float)a < (float)b; } \
    inline bool __hgt(T a, T b) { return (float)a > (float)b; } \
    inline bool __heq(T a, T b) { return (float)a == (float)b; } \
    inline bool __hisnan(T a) { return std::isnan((float)a); } \
    inline T##2 __hadd2(T##2 a, T##2 b) { return T##2{__hadd(a.x, b.x), __hadd(a.y, b.y)}; } \
    inline T##2 __hmul2(T##2 a, T##2 b) { return T##2{__hmul(a.x, b.x), __hmul(a.y, b.y)}; } \
    inline T##2 __hmax2(T##2 a, T##2 b) { return T##2{__hmax(a.x, b.x), __hmax(a.y, b.y)}; } \
    inline T##2 __hmin2(T##2 a, T##2 b) { return T##2{__hmin(a.x, b.x), __hmin(a.y, b.y)}; }
KCUDA_HALF_OPS(__half)
KCUDA_HALF_OPS(__nv_bfloat16)
