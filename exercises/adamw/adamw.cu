// AdamW in CUDA — one fused optimizer step over n parameters, updating p, m and v in place.
//
// p (the parameters), g (their gradient), m and v (the first and second moments) are DEVICE pointers to n
// float32 values each; g is read-only. With t = step (1 on the first step), write for every i:
//     m[i] = beta1 * m[i] + (1 - beta1) * g[i]
//     v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i]
//     m_hat = m[i] / (1 - beta1^t)          v_hat = v[i] / (1 - beta2^t)          (bias correction)
//     p[i] = p[i] - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p[i])     (decoupled weight decay)
// with the NEW m[i] and v[i] and the OLD p[i] on the right. This is torch.optim.AdamW's step. The weight decay
// acts on p directly: adding weight_decay * p to the gradient instead is Adam with L2, a different optimizer.
// README.md has the details and a ladder of steps from correct to fast.
// Grade with: kcourse grade adamw
#include <cuda_runtime.h>

#include <cmath>

constexpr int THREADS = 256;

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int n, float lr, float beta1, float beta2,
                             float eps, float weight_decay, float bias_correction1, float bias_correction2) {
    // TODO: one thread per element: int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }
    //   read p[i], g[i], m[i] and v[i] once into registers, compute the new m, v and p from the formulas
    //   above (sqrtf(v_hat) + eps: eps goes outside the square root), then store p[i], m[i] and v[i]
}

extern "C" void adamw(float* p, const float* g, float* m, float* v, int n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, int step) {
    // TODO: the bias corrections are the same for every element: compute them once here, on the host, in
    //   double (1 - 0.999^2 loses 3 of float's 7 digits to cancellation):
    //     const float bias_correction1 = (float)(1.0 - pow((double)beta1, step));   (bias_correction2 alike)
    //   then launch one thread per element:
    //     adamw_kernel<<<(n + THREADS - 1) / THREADS, THREADS>>>(p, g, m, v, n, lr, beta1, beta2, eps,
    //                                                          weight_decay, bias_correction1, bias_correction2);
}
