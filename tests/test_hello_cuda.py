"""hello_cuda, and what the grader grew for it: exercises with no inputs (the reference takes the case's
sizes by keyword), int32 outputs compared exactly, and a poisoned guard after every output that catches
stores past its end (a missing bounds check).

On the CPU the CUDA kernels cannot run, so the classic mistakes of the exercise are played on the CPU:
each launch is simulated thread by thread (its grid, its block, its bounds check) into the grader's own
output tensors, and judged with the grader's own checks; every mistake must fail some case of the spec.
The real kernels are graded on a GPU by the tests marked gpu at the end; the mistakes' fixtures (the spec's
[[mistakes]]) on the CPU emulator and on a GPU by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import pytest
import torch
from conftest import submission

from grader.checks.checking import compare, load_reference, reference_keywords, reference_outputs
from grader.checks.inputs import INT_POISON, make_outputs, written_outside
from grader.core.discovery import Target, discover_exercises, resolve
from grader.core.spec import Case, load_spec
from grader.run.grade import grade

SPEC = discover_exercises()["hello_cuda"]
REFERENCE = load_reference(SPEC.folder / "reference.py")
CPU_CASES = [c for c in SPEC.cases if not c.gpu_only]
GRID_Y_LIMIT = 65535


# --- the grader's growth: reference keywords, int32 exactness, the guard -----------------------------


def test_a_reference_without_inputs_gets_the_case_sizes_and_device_by_keyword():
    def reference(*, n, device="cpu"):
        return torch.arange(n, dtype=torch.int32, device=device)

    assert reference_keywords(reference, {"n": 5, "m": 2}, "cuda") == {"n": 5, "device": "cuda"}
    assert reference_keywords(lambda x: x, {"n": 5}) == {}  # positional references are called as before
    spec = load_spec(SPEC.folder)
    ids, row_idx, col_idx = reference_outputs(REFERENCE, spec, {}, {"n": 3, "rows": 2, "cols": 3})
    assert ids.tolist() == [0, 1, 2]
    assert row_idx.tolist() == [[0, 0, 0], [1, 1, 1]] and col_idx.tolist() == [[0, 1, 2], [0, 1, 2]]
    assert ids.dtype == torch.int32


def test_int32_outputs_are_compared_exactly_and_poisoned_with_an_int():
    outputs = make_outputs(SPEC, Case({"n": 5, "rows": 2, "cols": 3}), "cpu")
    assert all(t.dtype == torch.int32 and (t == INT_POISON).all() for t in outputs.values())
    tol = SPEC.tolerance_of(SPEC.cases[0])
    want = torch.arange(5, dtype=torch.int32)
    assert compare("ids", want.clone(), want, tol, "n=5").ok
    off_by_one = want.clone()
    off_by_one[4] = 5
    assert compare("ids", off_by_one, want, tol, "n=5").code == "mismatch"


@pytest.mark.parametrize(
    "exercise,layout", [("hello_cuda", None), ("softmax", None), ("softmax", "row_slice"), ("softmax", "transposed")]
)
def test_a_store_outside_an_output_is_seen_and_writing_only_inside_is_not(exercise, layout):
    spec = discover_exercises()[exercise]
    params = {"n": 10, "rows": 3, "cols": 4} if exercise == "hello_cuda" else {"M": 3, "N": 4}
    case = Case(params, outputs={spec.outputs[0].name: {"layout": layout}} if layout else {})
    out = make_outputs(spec, case, "cpu")[spec.outputs[0].name]
    out.fill_(1)  # every element of the output itself written
    assert not written_outside(out)
    whole = out.new_empty(0).set_(out.untyped_storage())
    if layout == "transposed":  # the allocation is exactly the output: nothing outside to spoil
        assert whole.numel() == out.numel()
        return
    inside = torch.zeros(whole.numel(), dtype=torch.bool)
    inside.as_strided(out.shape, out.stride(), out.storage_offset()).fill_(True)
    whole[int(inside.nonzero().max()) + 1] = 7  # the element just past the end (past a row, for a row slice)
    assert written_outside(out)


# --- an exercise with no inputs, end to end on the CPU (a Triton variant, under the interpreter) ---------

IOTA_SPEC = """
id = "iota"
[variants.triton]
stub = "iota.py"
entry = "iota"
args = ["ids"]
[outputs.ids]
shape = ["n"]
dtype = "int32"
[[cases]]
n = 1
[[cases]]
n = 1000
[tolerance.float32]
atol = 0
rtol = 0
[performance]
bytes = "4 * n"
[[performance.cases]]
n = 1000
"""

IOTA_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def iota_kernel(ids_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ids_ptr + offsets, offsets{mask})


def iota(ids):
    iota_kernel[(triton.cdiv(ids.numel(), 256),)](ids, ids.numel(), BLOCK=256)
"""


def _iota_target(tmp_path):
    folder = tmp_path / "iota"
    folder.mkdir()
    (folder / "spec.toml").write_text(IOTA_SPEC)
    (folder / "reference.py").write_text(
        "import torch\n\n\ndef reference(*, n, device='cpu'):\n"
        "    return torch.arange(n, dtype=torch.int32, device=device)\n"
    )
    spec = load_spec(folder)
    return Target(spec, spec.variant("triton"))


def _iota_grade(tmp_path, name, mask=", mask=offsets < n"):
    target = _iota_target(tmp_path)
    path = tmp_path / f"{name}.py"
    path.write_text(IOTA_KERNEL.format(mask=mask))
    return grade(target, submission=path, seed=3, record=False)


def _failure(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


@pytest.mark.slow
def test_an_exercise_without_inputs_is_graded_end_to_end(tmp_path):
    result = _iota_grade(tmp_path, "good")  # on a GPU also timed: torch's baseline gets its sizes by keyword
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    assert not [c for c in result.checks if c.status in ("failed", "error")], result.verdict


@pytest.mark.slow
def test_a_store_past_the_end_fails_with_its_own_message(tmp_path):
    result = _iota_grade(tmp_path, "unmasked", mask="")
    check = _failure(result)
    assert check.details["code"] == "out_of_bounds" and check.details["outputs"] == ["ids"]
    assert "wrote past the end of ids" in check.message and "n=1" in check.message


# --- the exercise's cases against the classic mistakes, launches simulated on the CPU -------------------


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


class Launch:
    """One kernel's stores: flat indices and values per output, as the threads of a grid would make them."""

    def __init__(self):
        self.stores: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def store(self, name: str, where: torch.Tensor, value: torch.Tensor) -> None:
        self.stores.setdefault(name, []).append((where, value))


def threads_1d(blocks: int, threads: int) -> torch.Tensor:
    """blockIdx.x * blockDim.x + threadIdx.x of every thread; a block past 1024 threads launches nothing."""
    return torch.arange(blocks * threads) if threads <= 1024 else torch.empty(0, dtype=torch.long)


def threads_2d(grid: tuple[int, int], block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(global x, global y) of every thread of a 2-D launch; a grid past the y limit launches nothing."""
    if grid[1] > GRID_Y_LIMIT or block[0] * block[1] > 1024:
        return torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    y, x = torch.meshgrid(torch.arange(grid[1] * block[1]), torch.arange(grid[0] * block[0]), indexing="ij")
    return x.flatten(), y.flatten()


def correct_1d(launch, n, *, threads=256, round_up=True, check=True, one_block=False):
    if one_block:  # <<<1, n>>>
        threads = n
    i = threads_1d(1 if one_block else _ceil(n, threads) if round_up else n // threads, threads)
    keep = i < n if check else torch.ones_like(i, dtype=torch.bool)
    launch.store("ids", i[keep], i[keep])


def correct_2d(
    launch,
    rows,
    cols,
    *,
    block=(32, 8),
    check=True,
    row_on_x=False,
    swap_values=False,
    stride="cols",
    grid_follows=False,
):
    """The 2-D kernel with one mistake switched on (keyword arguments name them)."""
    along_x, along_y = (rows, cols) if row_on_x and grid_follows else (cols, rows)
    x, y = threads_2d((_ceil(along_x, block[0]), _ceil(along_y, block[1])), block)
    row, col = (x, y) if row_on_x else (y, x)
    keep = (row < rows) & (col < cols) if check else torch.ones_like(row, dtype=torch.bool)
    row, col = row[keep], col[keep]
    where = row * (rows if stride == "rows" else cols) + col
    launch.store("row_idx", where, col if swap_values else row)
    launch.store("col_idx", where, row if swap_values else col)


MISTAKES = {
    "1-D grid rounded down": lambda l, c: (correct_1d(l, c["n"], round_up=False), correct_2d(l, c["rows"], c["cols"])),
    "1-D bounds check missing": lambda l, c: (correct_1d(l, c["n"], check=False), correct_2d(l, c["rows"], c["cols"])),
    "1-D <<<1, n>>>": lambda l, c: (correct_1d(l, c["n"], one_block=True), correct_2d(l, c["rows"], c["cols"])),
    "2-D bounds check missing": lambda l, c: (correct_1d(l, c["n"]), correct_2d(l, c["rows"], c["cols"], check=False)),
    "2-D row from x, column from y": lambda l, c: (
        correct_1d(l, c["n"]),
        correct_2d(l, c["rows"], c["cols"], row_on_x=True),
    ),
    "2-D row and column values swapped": lambda l, c: (
        correct_1d(l, c["n"]),
        correct_2d(l, c["rows"], c["cols"], swap_values=True),
    ),
    "2-D row * rows + col": lambda l, c: (correct_1d(l, c["n"]), correct_2d(l, c["rows"], c["cols"], stride="rows")),
    "2-D one row per block (1024 x 1 blocks)": lambda l, c: (
        correct_1d(l, c["n"]),
        correct_2d(l, c["rows"], c["cols"], block=(1024, 1)),
    ),
}
CORRECT = {
    "the solution's shape": lambda l, c: (correct_1d(l, c["n"]), correct_2d(l, c["rows"], c["cols"])),
    # uncoalesced but right: the row on x with the grid sized for it is the speed ladder's business
    "row on x, grid sized for it": lambda l, c: (
        correct_1d(l, c["n"]),
        correct_2d(l, c["rows"], c["cols"], row_on_x=True, grid_follows=True),
    ),
    "1-D blocks of 1024, 2-D blocks of 16 x 16": lambda l, c: (
        correct_1d(l, c["n"], threads=1024),
        correct_2d(l, c["rows"], c["cols"], block=(16, 16)),
    ),
}


def simulated_verdict(kernels, case: Case) -> str:
    """The grader's verdict code for a simulated run of `kernels` on one case: ok, out_of_bounds, or compare's."""
    launch = Launch()
    kernels(launch, case.params)
    outputs = make_outputs(SPEC, case, "cpu")
    for name, stores in launch.stores.items():
        whole = outputs[name].new_empty(0).set_(outputs[name].untyped_storage())
        for where, value in stores:
            inside = where < whole.numel()  # beyond the guard: a fault or another tensor's memory, either way not ok
            if not bool(inside.all()):
                return "out_of_bounds"
            whole[where] = value.to(torch.int32)
    if any(written_outside(t) for t in outputs.values()):
        return "out_of_bounds"
    refs = reference_outputs(REFERENCE, SPEC, {}, case.params)
    tol = SPEC.tolerance_of(case)
    for spec_out, ref in zip(SPEC.outputs, refs):
        result = compare(spec_out.name, outputs[spec_out.name], ref, tol, case.label())
        if not result.ok:
            return result.code
    return "ok"


@pytest.mark.parametrize("name", list(MISTAKES))
def test_every_classic_mistake_fails_some_case(name):
    verdicts = {case.label(): simulated_verdict(MISTAKES[name], case) for case in CPU_CASES}
    assert any(v != "ok" for v in verdicts.values()), f"{name} passes every case: {verdicts}"


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_launch_shapes_pass_every_case(name):
    for case in CPU_CASES:
        assert simulated_verdict(CORRECT[name], case) == "ok", (name, case.label())


def test_a_missing_bounds_check_fails_already_at_the_smallest_case():
    smallest = CPU_CASES[0]
    assert simulated_verdict(MISTAKES["1-D bounds check missing"], smallest) == "out_of_bounds"
    assert simulated_verdict(MISTAKES["2-D bounds check missing"], smallest) == "out_of_bounds"


def test_timed_bytes_count_every_store():
    from grader.core import exprs

    params = {"n": 8, "rows": 2, "cols": 3}
    stored = sum(o.numel() * o.element_size() for o in reference_outputs(REFERENCE, SPEC, {}, params))
    assert exprs.evaluate(SPEC.performance.bytes, params) == stored


# --- on a GPU: the real kernels ------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_one_int_per_thread_kernel_passes_numerics_on_the_gpu():
    result = grade(
        resolve(("hello_cuda",)), submission=submission("hello_cuda_one_per_thread.cu"), seed=11, record=False
    )
    assert next(c for c in result.checks if c.name == "numerics").status == "passed", result.verdict
    if result.timings:
        t = result.timings[-1]
        print(
            f"\nhello_cuda one int per thread: {t.case}: {t.learner_ms:.4g} ms, {t.roofline_pct or 0:.0f}% of roofline; "
            f"solution {t.solution_ms or 0:.4g} ms ({t.solution_roofline_pct or 0:.0f}%); torch {t.torch_ms or 0:.4g} ms"
        )
