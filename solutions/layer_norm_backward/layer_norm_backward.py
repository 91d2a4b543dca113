"""Solution — layer norm backward: dx row by row, dw and db reduced over rows in two deterministic stages.

Stage 1 launches a program or two of 8 warps per SM at N = 4096 (as many as keep STAGED_BYTES of loads in
flight an SM, no more than the GPU holds at once). Each program keeps weight and its running dw and db in
float32 registers, walks the groups of ROWS rows pid, pid + P, pid + 2P, ... and for each group reads x and dy
once (the loop's num_stages has the compiler copy the next groups into shared memory while this one is summed,
so memory is always busy), writes dx once and adds dy * xhat and dy to its running sums; at the end it stores
them as row pid of a [P, N] float32 buffer. ROWS is 4096 / BLOCK (at least 1): a row of 256 values is one KB,
and a program that waits on one at a time leaves memory idle (the capstone's layer norms, N = 256: 0.40 ms a
call with one row a program, 0.14 ms with 16, on the H200). No two programs touch the same buffer row: no
locks, no atomics, and the same answer every run. Stage 2 sums the P rows of each column block. So x and dy
are read once, dx is written once, and the partials add 2 * 2 * P * N * 4 bytes (a few % at the timed sizes).

Rows longer than 8192 columns (not timed) take a looping kernel: the two row sums over column blocks,
then the update, with the program's partial row kept in its own slice of the buffer in global memory.
"""

import functools

import torch
import triton
import triton.language as tl

MAX_FUSED = 8192  # longest row kept in registers (x, dy, weight, dw, db: 16 a thread at 16 warps)
LONG_BLOCK = 4096  # column block of the looping kernel (8 elements a thread at 16 warps)
SUM_BLOCK_M, SUM_BLOCK_N = 64, 32  # stage 2 tile: 32 columns (128-byte rows) give N / 32 programs
# Stage 1's loads are staged in shared memory STAGES groups deep, and the grid is sized so that each SM holds
# about STAGED_BYTES of them: at 4096 columns, 2 programs an SM in bfloat16 and 1 in float32. On the H200
# (scripts/design_bench.py layer_norm_backward, validate) that reached 3,535-3,583 GB/s, 84-85% of copy, at
# 16384x4096 bfloat16 (1 program an SM: 69-71%; 3: 67-69%) and 3,164-3,292, 75-78%, at 4096x4096 float32
# (2 an SM: 71-73%).
STAGES = 3
STAGED_BYTES = 96 * 1024
REDUCTION_SHARED = 8 * 1024  # what the row sums' exchange between warps needs besides
CPU_PROGRAMS = 16  # under the interpreter: the number of programs only changes how the rows are shared
CPU_SUM_BLOCK_N = 1024  # and each program costs time there: wide stage 2 tiles, few programs


@triton.jit
def layer_norm_backward_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    mean_ptr,
    rstd_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    col_mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    dw = tl.zeros([ROWS, BLOCK], tl.float32)
    db = tl.zeros([ROWS, BLOCK], tl.float32)
    offs = tl.arange(0, ROWS)
    # num_stages: the compiler copies the next STAGES - 1 groups' x and dy into shared memory (cp.async) while
    # this group is summed and stored, so memory is always busy
    for group in tl.range(pid, tl.cdiv(n_rows, ROWS), tl.num_programs(0), num_stages=STAGES):
        rows = tl.cast(group * ROWS + offs, tl.int64)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)[:, None]
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)[:, None]
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = w * dy
        c1 = tl.sum(xhat * wdy, axis=1)[:, None] / n_cols
        c2 = tl.sum(wdy, axis=1)[:, None] / n_cols
        dx = (wdy - (xhat * c1 + c2)) * rstd
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(dw_part_ptr + pid * n_cols + cols, tl.sum(dw, axis=0), mask=col_mask)
    tl.store(db_part_ptr + pid * n_cols + cols, tl.sum(db, axis=0), mask=col_mask)


@triton.jit
def layer_norm_backward_long_kernel(
    x_ptr,
    w_ptr,
    dy_ptr,
    mean_ptr,
    rstd_ptr,
    dx_ptr,
    dw_part_ptr,
    db_part_ptr,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    n_rows,
    n_cols,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    dw_row, db_row = dw_part_ptr + pid * n_cols, db_part_ptr + pid * n_cols  # this program's alone
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        tl.store(dw_row + cols, tl.zeros([BLOCK], tl.float32), mask=cols < n_cols)
        tl.store(db_row + cols, tl.zeros([BLOCK], tl.float32), mask=cols < n_cols)
    for row in range(pid, n_rows, tl.num_programs(0)):
        r = tl.cast(row, tl.int64)
        x_row, dy_row, dx_row = x_ptr + r * x_row_stride, dy_ptr + r * dy_row_stride, dx_ptr + r * dx_row_stride
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        sum1 = tl.zeros([BLOCK], tl.float32)
        sum2 = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            sum1 += xhat * w * dy
            sum2 += w * dy
        c1 = tl.sum(sum1, axis=0) / n_cols
        c2 = tl.sum(sum2, axis=0) / n_cols
        for start in range(0, n_cols, BLOCK):  # the second read of the row mostly hits L2
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            tl.store(dx_row + cols, ((w * dy - (xhat * c1 + c2)) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
            # the same thread stored these elements for the previous row: it reads its own write back
            tl.store(dw_row + cols, tl.load(dw_row + cols, mask=mask) + dy * xhat, mask=mask)
            tl.store(db_row + cols, tl.load(db_row + cols, mask=mask) + dy, mask=mask)


@triton.jit
def sum_partials_kernel(
    dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, n_parts, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    dw = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in range(0, n_parts, BLOCK_M):
        parts = start + tl.arange(0, BLOCK_M)
        mask = (parts[:, None] < n_parts) & col_mask[None, :]
        offsets = parts[:, None] * n_cols + cols[None, :]
        dw += tl.load(dw_part_ptr + offsets, mask=mask, other=0.0)
        db += tl.load(db_part_ptr + offsets, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(dw, axis=0), mask=col_mask)
    tl.store(db_ptr + cols, tl.sum(db, axis=0), mask=col_mask)


_RESIDENT: dict[tuple, int] = {}  # (kernel, device, dtypes, BLOCK, num_warps) -> programs the GPU runs at once


def _resident_programs(kernel, args: tuple, consts: dict, num_warps: int) -> int:
    """How many programs of the compiled kernel the whole GPU runs at once: its registers, shared memory and
    threads against each SM's (how the Triton tutorial on fused softmax sizes its grid). More would start a
    second wave that finishes late; fewer leave bandwidth unused. Worked out once per configuration."""
    x, weight, dy, dx = args[0], args[1], args[2], args[5]
    key = (kernel, x.device.index or 0, x.dtype, weight.dtype, dy.dtype, dx.dtype, tuple(consts.items()), num_warps)
    if key not in _RESIDENT:
        compiled = kernel.warmup(*args, grid=(1,), **consts, num_warps=num_warps)
        compiled._init_handles()
        props = _device_properties(key[1])
        threads = num_warps * 32
        per_sm = min(props["max_num_regs"] // max(1, compiled.n_regs * threads), 2048 // threads)
        if compiled.metadata.shared:
            per_sm = min(per_sm, props["max_shared_mem"] // compiled.metadata.shared)
        _RESIDENT[key] = props["multiprocessor_count"] * max(1, per_sm)
    return _RESIDENT[key]


def _stages(x: torch.Tensor, group_bytes: int) -> int:
    """STAGES, or fewer where one program's staged groups (group_bytes each: a group's x and dy) would not fit
    in an SM's shared memory (float32 rows of 8192 on an A100, of 4096 on a GPU with 100 KB an SM); 1 stages
    nothing: each group is loaded when its turn comes."""
    if not x.is_cuda:
        return STAGES
    shared = _device_properties(x.device.index or 0)["max_shared_mem"]  # bytes a program may have
    return max(1, min(STAGES, (shared - REDUCTION_SHARED) // group_bytes))


@functools.cache
def _device_properties(device: int) -> dict:
    """The driver's account of the GPU (SMs, registers, shared memory). Asked once: the query took about a
    millisecond a call on the H200, ten times the kernel."""
    return triton.runtime.driver.active.utils.get_device_properties(device)


def _programs(
    kernel, args: tuple, consts: dict, num_warps: int, programs_per_sm: int | None, staged_bytes: int | None
) -> int:
    """Stage 1's grid. staged_bytes: what one program stages in shared memory (None: the looping kernel)."""
    x = args[0]
    if not x.is_cuda:
        return CPU_PROGRAMS
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    if programs_per_sm:  # `kcourse tune layer_norm_backward` tries a few
        return sms * programs_per_sm
    # as many programs as keep STAGED_BYTES an SM on their way from DRAM; the looping kernel: 2 (more measured slower)
    per_sm = max(1, STAGED_BYTES // staged_bytes) if staged_bytes else 2
    return min(per_sm * sms, _resident_programs(kernel, args, consts, num_warps))


def layer_norm_backward(
    x: torch.Tensor,
    weight: torch.Tensor,
    dy: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    dx: torch.Tensor,
    dw: torch.Tensor,
    db: torch.Tensor,
    num_warps: int | None = None,
    programs_per_sm: int | None = None,
) -> None:
    n_rows, n_cols = x.shape
    fused = triton.next_power_of_2(n_cols) <= MAX_FUSED
    kernel = layer_norm_backward_kernel if fused else layer_norm_backward_long_kernel
    block = triton.next_power_of_2(n_cols) if fused else LONG_BLOCK
    # 16 elements of each row a thread (8 warps at 4096 columns, 16 at 8192); before the loads were staged, the
    # H200 measured 3,049 GB/s for 8 warps x 2 an SM against 2,523 for 16 warps x 1 (bf16 16384x4096)
    rows = max(1, 4096 // block) if fused else 1
    num_warps = num_warps or max(4, min(16, rows * block // 512))
    args = (x, weight, dy, mean, rstd, dx, dw, db, x.stride(0), dy.stride(0), dx.stride(0), n_rows, n_cols)
    group_bytes = rows * block * (x.element_size() + dy.element_size())  # a group's x and dy
    consts = {"BLOCK": block, "ROWS": rows, "STAGES": _stages(x, group_bytes)} if fused else {"BLOCK": block}
    staged_bytes = consts["STAGES"] * group_bytes if fused else None
    programs = min(triton.cdiv(n_rows, rows), _programs(kernel, args, consts, num_warps, programs_per_sm, staged_bytes))
    # the programs' partial rows: float32, however many rows each program sums
    partials = torch.empty((2, programs, n_cols), dtype=torch.float32, device=x.device)
    args = (*args[:6], partials[0], partials[1], *args[8:])
    kernel[(programs,)](*args, **consts, num_warps=num_warps)
    block_n = SUM_BLOCK_N if x.is_cuda else CPU_SUM_BLOCK_N
    sum_partials_kernel[(triton.cdiv(n_cols, block_n),)](
        partials[0], partials[1], dw, db, programs, n_cols, BLOCK_M=SUM_BLOCK_M, BLOCK_N=block_n, num_warps=4
    )
