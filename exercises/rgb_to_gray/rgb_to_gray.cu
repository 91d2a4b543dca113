// Day 8 — image processing: RGB to grayscale.
//
// rgb (H x W x 3 bytes) and gray (H x W bytes) are DEVICE pointers; gray holds garbage when you are called.
// The image is row-major and interleaved: pixel (y, x) has R, G, B at rgb[(y * W + x) * 3 + 0, 1, 2],
// and its gray value goes to gray[y * W + x]. The value is defined in integers (see README.md):
//     gray = (299 * R + 587 * G + 114 * B + 500) / 1000
// Grade with: kcourse grade rgb_to_gray
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void rgb_to_gray_kernel(const uint8_t* rgb, uint8_t* gray, int H, int W) {
    // TODO: x (the column) from the x dimension of a 2-D grid, y (the row) from the y dimension; if both are
    //       inside the image, read the three bytes of pixel (y, x), compute the formula above in unsigned
    //       int arithmetic, and store the result (at most 255) in gray[y * W + x].
}

extern "C" void rgb_to_gray(const uint8_t* rgb, uint8_t* gray, int H, int W) {
    // TODO: launch rgb_to_gray_kernel on dim3 threads(32, 8) and a grid covering W along x and H along y
    //       (round both up).
}
