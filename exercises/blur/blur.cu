// Day 8 — image processing: a box blur of radius r.
//
// img and out (H x W floats, row-major) are DEVICE pointers; out holds garbage when you are called.
// out[y][x] is the mean of the (2r+1) x (2r+1) square of img around (y, x), counting ONLY the pixels inside
// the image: near a border the square is cut, and you divide by the number of pixels that are left.
// r runs from 0 to 16. See README.md for a path from a correct kernel to one at the memory roofline.
// Grade with: kcourse grade blur
#include <cuda_runtime.h>

__global__ void blur_kernel(const float* img, float* out, int H, int W, int r) {
    // TODO: x (the column) from the x dimension of a 2-D grid, y (the row) from y; if (y, x) is inside the
    //       image, sum img[yy * W + xx] over max(0, y - r) <= yy <= min(H - 1, y + r) and
    //       max(0, x - r) <= xx <= min(W - 1, x + r), and write the sum divided by how many pixels it has.
}

extern "C" void blur(const float* img, float* out, int H, int W, int r) {
    // TODO: launch blur_kernel on dim3 threads(32, 8) and a grid covering W along x and H along y (round up).
}
