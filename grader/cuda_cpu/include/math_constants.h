// CUDA's math_constants.h on the CPU: the constants kernels use.
#pragma once
#include <cmath>
#include <cfloat>
#define CUDART_INF_F HUGE_VALF
#define CUDART_NAN_F NAN
#define CUDART_INF HUGE_VAL
#define CUDART_NAN NAN
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931e+0
#define CUDART_SQRT_2_F 1.414213562f
#define CUDART_SQRT_HALF_F 0.707106781f
#define CUDART_L2E_F 1.442695041f
#define CUDART_LN2_F 0.693147181f
#define CUDART_MAX_NORMAL_F FLT_MAX
#define CUDART_MIN_DENORM_F 1.40129846e-45f
