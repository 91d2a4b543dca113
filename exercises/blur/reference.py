"""Reference: the box blur of radius r, averaging only the pixels inside the image.

out[y][x] = mean of img[y'][x'] over |y' - y| <= r, |x' - x| <= r, 0 <= y' < H, 0 <= x' < W. Near a border
fewer pixels are averaged (at a corner, (r + 1)^2): no pixel is repeated (clamping) and no zeros are
averaged in (zero padding). This is avg_pool2d with stride 1, padding r and count_include_pad=False."""

import torch


def reference(img: torch.Tensor, *, r: int) -> torch.Tensor:
    pooled = torch.nn.functional.avg_pool2d(
        img[None, None], kernel_size=2 * r + 1, stride=1, padding=r, count_include_pad=False
    )
    return pooled[0, 0]
