"""`kcourse viz`: what each program of a Triton kernel loaded and stored, recorded under the interpreter.

The fast tests record kernels in this process (tests/interpreted.py) with the child's Recorder and check the
summary and the pictures; the slow ones run the command as a learner does, the kernel in a grading child."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT, submission
from interpreted import interpreter_on, load_interpreted

from grader.checks.inputs import make_inputs, make_outputs
from grader.child.viz import Recorder
from grader.cli import main
from grader.commands import tools, viz
from grader.core.discovery import resolve
from grader.core.spec import load_spec

VECTOR_ADD = load_spec(ROOT / "exercises" / "vector_add")
SOFTMAX = load_spec(ROOT / "exercises" / "softmax")
N_1000 = 1  # vector_add's case n=1000: the default (n=1 draws one element)
M16_N300 = 7  # softmax's case M=16 N=300: the smallest with 100 elements or more


def record(path: Path, spec, case_index: int) -> dict:
    """The findings of one call of the entry point in `path`, on the spec's case, as the child makes them."""
    case = spec.cases[case_index]
    inputs = make_inputs(spec, case, 1, "cpu")
    outputs = make_outputs(spec, case, "cpu", inputs)
    tensors = {**inputs, **outputs}
    module = load_interpreted(path, f"viz_{path.stem}")
    entry = getattr(module, spec.variants["triton"].entry)
    recorder = Recorder({name: (t, "output" if name in outputs else "input") for name, t in tensors.items()})
    with interpreter_on(), recorder.installed():
        entry(*[tensors[a.name] for a in spec.variants["triton"].args])
    return {"case": case.label(), **recorder.findings()}


def summary(findings: dict) -> tuple[dict, list[str]]:
    rows = viz.summarise(findings)
    return {row["name"]: row for row in rows}, viz.problems({"tensors": rows, "stray": findings["stray"]})


def red_pixels(png: Path) -> int:
    pixels = matplotlib.image.imread(png)
    return int(((pixels[..., 0] > 0.8) & (pixels[..., 1] < 0.1) & (pixels[..., 2] < 0.1)).sum())


# --- recording, in this process ---------------------------------------------------------------------


@pytest.mark.solutions
def test_the_vector_add_solution_stores_every_element_exactly_once(tmp_path):
    findings = record(ROOT / "solutions" / "vector_add" / "vector_add.py", VECTOR_ADD, N_1000)
    assert [launch["kernel"] for launch in findings["launches"]] == ["add_kernel"]
    assert findings["launches"][0]["args"] == {"a_ptr": "a", "b_ptr": "b", "c_ptr": "c"}
    c = next(t for t in findings["tensors"] if t["name"] == "c")
    assert set(c["kinds"]) == {"store"} and set(c["kinds"]["store"]["programs"]) == {1}
    rows, found = summary(findings)
    assert rows["a"]["touched"] == {"load": 1000} and rows["b"]["touched"] == {"load": 1000}
    assert rows["c"]["touched"] == {"store": 1000} and rows["c"]["never_written"][0] == 0
    assert rows["c"]["written_twice"][0] == 0 and rows["c"]["out_of_range"]["store"][1] == 0  # the mask holds
    assert found == []


def test_a_grid_too_short_for_the_tail_leaves_it_never_written(tmp_path):
    findings = record(submission("vector_add_no_tail.py"), VECTOR_ADD, N_1000)
    assert findings["launches"][0]["grid"] == [3, 1, 1]  # 1000 // 256 programs
    program = np.asarray(next(t for t in findings["tensors"] if t["name"] == "c")["kinds"]["store"]["program"])
    assert (program[:768] == np.repeat([0, 1, 2], 256)).all() and (program[768:] == -1).all()
    rows, found = summary(findings)
    assert rows["c"]["never_written"] == [232, "index 768"] and rows["a"]["touched"]["load"] == 768
    assert found == [
        "c: 232 of 1000 elements never written (first at index 768) — launch enough programs to cover "
        "every element (triton.cdiv(n, BLOCK)) and check each program's offsets"
    ]
    png = viz.draw(next(t for t in findings["tensors"] if t["name"] == "c"), findings["launches"], tmp_path / "c.png")
    assert png.stat().st_size > 0 and red_pixels(png) == 0  # a gap, no race
    from triton.runtime import interpreter  # imported only once TRITON_INTERPRET was set: tl.exp & co. depend on it

    assert "create_masked_store" not in interpreter.interpreter_builder.__dict__  # the interpreter as it was
    assert interpreter.GridExecutor._init_args_hst.__name__ == "_init_args_hst"


def test_overlapping_blocks_are_stored_twice_and_drawn_red(tmp_path):
    findings = record(submission("vector_add_overlapping_blocks.py"), VECTOR_ADD, N_1000)
    assert findings["launches"][0]["grid"] == [8, 1, 1]
    rows, found = summary(findings)
    assert rows["c"]["written_twice"] == [872, "index 128"] and rows["c"]["never_written"][0] == 0
    assert len(found) == 1 and found[0].startswith(
        "c: 872 elements stored by two programs or more (first at index 128)"
    )
    c = next(t for t in findings["tensors"] if t["name"] == "c")
    assert red_pixels(viz.draw(c, findings["launches"], tmp_path / "c.png")) > 1000
    a = next(t for t in findings["tensors"] if t["name"] == "a")  # shared loads are no race: darker, never red
    assert red_pixels(viz.draw(a, findings["launches"], tmp_path / "a.png")) == 0


def test_loads_and_stores_without_a_mask_are_counted_past_the_end():
    findings = record(submission("vector_add_no_mask.py"), VECTOR_ADD, N_1000)
    rows, found = summary(findings)
    assert rows["a"]["out_of_range"] == {"load": [0, 24]} and rows["c"]["out_of_range"] == {"store": [0, 24]}
    assert rows["c"]["never_written"][0] == 0 and findings["switched_off"] == 0  # past the end, inside the padding
    assert (
        "c: 24 stores fell outside its elements without a mask — pass mask= (e.g. offsets < n) to tl.store" in found[-1]
    )


def test_a_lane_far_outside_every_tensor_is_switched_off_not_dereferenced(tmp_path):
    wild = tmp_path / "vector_add_wild.py"
    wild.write_text(
        submission("vector_add_no_mask.py")
        .read_text()
        .replace("tl.load(b_ptr + offsets)", "tl.load(b_ptr + offsets + (offsets >= 999) * 1_000_000_000)")
    )
    findings = record(wild, VECTOR_ADD, N_1000)  # without the switch the interpreter would read far memory
    assert findings["stray"]["load"] == 25 and findings["switched_off"] == 25
    rows, found = summary(findings)
    assert rows["b"]["touched"]["load"] == 999
    assert found[-1].startswith("25 loads were nowhere near any tensor argument (kcourse viz switched them off")


@pytest.mark.solutions
def test_the_softmax_solution_gives_each_row_to_one_program():
    findings = record(ROOT / "solutions" / "softmax" / "softmax.py", SOFTMAX, M16_N300)
    assert findings["launches"][0]["grid"] == [16, 1, 1]
    out = next(t for t in findings["tensors"] if t["name"] == "out")
    program = np.asarray(out["kinds"]["store"]["program"]).reshape(16, 300)
    assert (program == np.arange(16)[:, None]).all()  # row r stored by program r
    rows, found = summary(findings)
    assert rows["out"]["touched"] == {"store": 4800} and rows["out"]["written_twice"][0] == 0 and found == []


def test_a_softmax_that_loads_past_its_row_reads_the_next_row_and_past_the_end(tmp_path):
    findings = record(submission("softmax_reads_past_row.py"), SOFTMAX, M16_N300)
    rows, found = summary(findings)
    assert rows["x"]["out_of_range"]["load"] == [0, 512 - 300]  # the last row's block runs past x
    assert rows["x"]["shared"]["load"] == 15 * (512 - 300)  # every other row's overrun reads the next row
    assert rows["out"]["never_written"][0] == 0 and rows["out"]["written_twice"][0] == 0
    assert found[0].startswith("x: 212 loads fell outside its elements without a mask")
    x = next(t for t in findings["tensors"] if t["name"] == "x")
    assert viz.draw(x, findings["launches"], tmp_path / "x.png").exists()


# --- the pieces: cases, pictures, what a CUDA version gets -------------------------------------------


def test_the_default_case_is_the_smallest_with_a_hundred_elements_and_case_checks_its_index():
    assert viz.choose_case(VECTOR_ADD, VECTOR_ADD.variants["triton"]) == N_1000
    assert viz.choose_case(SOFTMAX, SOFTMAX.variants["triton"]) == M16_N300
    assert viz.choose_case(SOFTMAX, SOFTMAX.variants["triton"], 1) == 1
    with pytest.raises(viz.CaseError, match=r"--case 99: softmax has cases 0 to 14 .* pick one of: 0 \(M=1 N=1\)"):
        viz.choose_case(SOFTMAX, SOFTMAX.variants["triton"], 99)
    with pytest.raises(viz.CaseError, match=r"--case 3 \(n=50000017\) is GPU-only: too large for the interpreter"):
        viz.choose_case(VECTOR_ADD, VECTOR_ADD.variants["triton"], 3)


def test_pictures_wrap_vectors_on_power_of_two_rows_and_colour_by_program():
    assert viz.grid_shape([1000]) == (32, 32) and viz.grid_shape([16, 300]) == (16, 300)
    assert viz.grid_shape([2, 3, 4]) == (6, 4) and viz.grid_shape([1]) == (1, 1)
    program, programs = np.array([0, 0, 1, -1, 2]), np.array([1, 1, 1, 0, 2])
    cells = viz.picture(program, programs, 2, 3, race=True).reshape(6, 4)
    assert (cells[0] == cells[1]).all() and not (cells[0] == cells[2]).all()  # one colour per program
    assert cells[3][3] == 0  # never stored: transparent, the hatching shows
    assert tuple(cells[4]) == viz.RACE and tuple(cells[5]) == viz.NO_ELEMENT
    shared = viz.picture(program, programs, 2, 3, race=False).reshape(6, 4)
    assert (shared[4][:3] < viz.palette()[2][:3]).all()  # loads by two programs: darker, not red
    assert viz.program_label(5, [2, 3, 1]) == "pid (1, 2)" and viz.program_label(5, [8, 1, 1]) == "pid 5"


def test_a_cuda_version_is_told_viz_is_triton_only_and_what_to_run_instead(tmp_path):
    with pytest.raises(tools.ToolError) as caught:
        viz.run_viz(resolve(("softmax",), lang="cuda"), tmp_path)
    message = str(caught.value)
    assert "kcourse viz draws Triton kernels only for now, and softmax (cuda) is CUDA code" in message
    assert "`kcourse viz softmax --lang triton` draws its Triton version" in message
    assert (
        "`kcourse grade softmax --lang cuda` prints a map of the output's wrong and never-written elements" in message
    )


# --- the command, the kernel in a grading child ------------------------------------------------------


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.slow
@pytest.mark.solutions
def test_viz_of_the_vector_add_solution_prints_a_clean_summary_and_draws_each_tensor(tmp_path):
    result = run("viz", "vector_add", "--lang", "triton", "--source", "solutions", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "at n=1000: run once under the Triton interpreter" in result.output
    assert "launch 0: add_kernel, grid (1,) = 1 program" in result.output
    assert "c output  1000 float32: 1000 stored, every element written, each by one program" in result.output
    assert "no problem seen in these accesses" in result.output and "Traceback" not in result.output
    for name in "abc":
        assert (tmp_path / f"viz_vector_add_triton_{name}.png").stat().st_size > 0


@pytest.mark.slow
def test_viz_of_a_short_grid_names_the_elements_never_written_and_exits_1(isolated_state):
    result = run("viz", "vector_add", "--file", str(submission("vector_add_no_tail.py")))
    assert result.exit_code == 1, result.output
    assert "launch 0: add_kernel, grid (3,) = 3 programs" in result.output
    assert "c: 232 of 1000 elements never written (first at index 768)" in result.output
    assert (isolated_state / "reports" / "viz_vector_add_triton_c.png").exists()  # the kit's reports folder


@pytest.mark.slow
@pytest.mark.solutions
def test_viz_of_the_softmax_solution_draws_its_rows(tmp_path):
    record = viz.run_viz(resolve(("softmax",)), tmp_path, source="solutions")
    assert record["case"].startswith("M=16 N=300") and record["launches"][0]["grid"] == [16, 1, 1]
    out = next(row for row in record["tensors"] if row["name"] == "out")
    assert out["touched"] == {"store": 4800} and out["never_written"][0] == 0 and out["written_twice"][0] == 0
    assert sorted(Path(p).name for p in record["pictures"]) == [
        "viz_softmax_triton_out.png",
        "viz_softmax_triton_x.png",
    ]


@pytest.mark.slow
@pytest.mark.solutions
def test_an_operator_that_returns_its_output_is_drawn_under_the_outputs_name(tmp_path):
    record = viz.run_viz(resolve(("custom_op",)), tmp_path, source="solutions")  # out is allocated by the learner
    out = next(row for row in record["tensors"] if row["name"] == "out")
    assert out["role"] == "output" and out["touched"] == {"store": 4800} and out["never_written"][0] == 0
    assert "scratch" not in {row["role"] for row in record["tensors"]}


@pytest.mark.slow
def test_a_learners_exception_or_hang_is_a_message_not_a_traceback(tmp_path):
    target = resolve(("vector_add",), lang="triton")
    with pytest.raises(tools.ToolError, match=r"your code raised IndexError: tuple index out of range") as caught:
        viz.run_viz(target, tmp_path, submission("vector_add_raises.py"))
    assert "Traceback" not in str(caught.value) and "vector_add_raises.py:5 in helper" in str(caught.value)
    with pytest.raises(tools.ToolError, match=r"your code ran past the 3 s limit while recording"):
        viz.run_viz(target, tmp_path, submission("vector_add_hangs.py"), timeout_s=3)
    assert not list(tmp_path.glob("*.png"))  # nothing drawn from a run that failed
