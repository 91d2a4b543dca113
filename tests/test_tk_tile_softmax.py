"""tk_tile_softmax, the ThunderKittens track's first exercise, and the grader's ThunderKittens support: the clone
found through KCOURSE_TK_ROOT (never shipped), its flags for sm_90a, a build skipped with what to do where it is
missing or the GPU is not a Hopper, and nvcc's template errors brought back to the learner's line.

ThunderKittens is found from KCOURSE_TK_ROOT, else ../shared/thirdparty/ThunderKittens beside the repository
(this project's copy of the headers); where neither is (a clean CI clone), the compile tests skip and say so."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from conftest import HAS_GPU, ROOT, _session_cache
from cuda_checks import figures, numerics
from cuda_rows import verdict
from tk_checks import SHARED_COPY, TK, needs_tk, with_tk  # noqa: F401 (with_tk: a fixture the tests use)

from grader.commands import envcheck
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import SpecError, load_spec
from grader.run.grade import grade
from grader.toolchain import build, nvcc_errors, thunderkittens

SPEC = discover_exercises()["tk_tile_softmax"]
STUB = ROOT / "exercises" / "tk_tile_softmax" / "tk_tile_softmax.cu"
SOLUTION = ROOT / "solutions" / "tk_tile_softmax" / "tk_tile_softmax.cu"
# --- finding ThunderKittens ------------------------------------------------------------------------------


def test_without_the_setting_the_reason_says_how_to_get_it(monkeypatch):
    monkeypatch.delenv(thunderkittens.ENV_VAR, raising=False)
    found = thunderkittens.find()
    assert not found.found and "KCOURSE_TK_ROOT is not set" in found.problem
    assert "git clone https://github.com/HazyResearch/ThunderKittens" in found.problem
    assert "ThunderKittens exercises: skipped" in " ".join(
        envcheck._thunderkittens_can_run({"gpu": None, "nvcc": "13.0", "thunderkittens": thunderkittens.describe(None)})
    )


def test_a_folder_that_is_not_a_clone_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv(thunderkittens.ENV_VAR, str(tmp_path))
    found = thunderkittens.find()
    assert not found.found and f"{tmp_path} holds no include/kittens.cuh" in found.problem


def test_a_relative_setting_is_found_from_the_course_root(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # anywhere but the course
    monkeypatch.setenv(thunderkittens.ENV_VAR, ".tk")
    assert thunderkittens.configured_root() == ROOT / ".tk"


def test_hopper_builds_for_sm_90a_and_another_gpu_is_told_why_not():
    assert thunderkittens.target_arch(None) == ("sm_90a", "")  # no GPU: a compile check
    assert thunderkittens.target_arch("sm_90") == ("sm_90a", "")
    arch, why = thunderkittens.target_arch("sm_80")
    assert arch is None and "this GPU is sm_80" in why and "H100" in why


@needs_tk
def test_env_check_reports_the_version_and_what_this_machine_can_do(with_tk):
    record = thunderkittens.describe(None)
    assert record["found"] and record["version"] in ("1.x", "2.x") and not record["can_run"]
    assert "no GPU: compile checks for sm_90a only" in record["note"]
    line = thunderkittens.format_line(record)
    assert line.startswith(f"tk       ThunderKittens {record['version']}") and str(TK) in line
    if TK == SHARED_COPY:
        assert record["version"] == "2.x" and record["commit"] == "0b55588d2769"  # its ORIGIN.md's commit
    assert envcheck._thunderkittens_can_run({"gpu": None, "nvcc": "13.0", "thunderkittens": record}) == [
        "ThunderKittens exercises: compile check for sm_90a (not run)"
    ]


def test_requires_names_known_libraries_on_nvcc_built_kinds(tmp_path):
    for extra, kind, expected in (
        ('["thunderkit"]', "cuda", "give a list of thunderkittens"),
        ('["thunderkittens"]', "triton", 'only kinds "cuda" and "cuda_host"'),
    ):
        folder = tmp_path / f"t_{kind}"
        folder.mkdir()
        (folder / "spec.toml").write_text(
            f'id = "{folder.name}"\n[variants.{"cuda" if kind == "cuda" else "triton"}]\nkind = "{kind}"\nstub = "b"\n'
            f'entry = "f"\nargs = ["x"]\nrequires = {extra}\n[inputs.x]\nshape = ["n"]\n[outputs.y]\nshape = ["n"]\n'
            "[[cases]]\nn = 3\n[tolerance.float32]\natol = 0\nrtol = 0\n"
        )
        with pytest.raises(SpecError, match=expected):
            load_spec(folder)


# --- grading without it, and on the wrong GPU -------------------------------------------------------------


@pytest.mark.nvcc
@pytest.mark.solutions
def test_without_thunderkittens_the_grade_is_skipped_with_what_to_do(monkeypatch):
    monkeypatch.delenv(thunderkittens.ENV_VAR, raising=False)
    result = grade(resolve(("tk_tile_softmax",)), source="solutions", seed=3, record=False)
    assert result.status == "skipped", result.verdict
    check = next(c for c in result.checks if c.name == "build")
    assert check.status == "skipped" and check.details["code"] == "requirement_missing"
    assert "export KCOURSE_TK_ROOT=" in check.message and "git clone" in check.message


@needs_tk
@pytest.mark.nvcc
def test_a_gpu_that_is_not_a_hopper_skips_the_build_and_says_why(with_tk):
    built = build.build_shared_library(STUB, "sm_80", requires=["thunderkittens"])
    assert built.skipped and not built.ok and built.skip_code == "requirement_missing" and "Hopper" in built.log


# --- compiling for sm_90a, and errors at the learner's line -----------------------------------------------

# A type error in a TK call: a row vector (one value per column) where row_max wants a column vector (one a row).
WRONG_VECTOR = (
    "    // TODO 1:",
    "    rt_fl<TILE_ROWS, COLS> a; typename rt_fl<TILE_ROWS, COLS>::row_vec m;\n"
    "    warp::load(a, xs[w]); warp::row_max(m, a);\n    // TODO 1:",
)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The stub, the solution and the stub with WRONG_VECTOR, compiled for sm_90a at once (~15 s each)."""
    if TK is None:
        pytest.skip(needs_tk.kwargs["reason"])
    if build.find_nvcc() is None:
        pytest.skip("nvcc not found: install the CUDA Toolkit")
    text = STUB.read_text()
    assert WRONG_VECTOR[0] in text
    wrong = tmp_path_factory.mktemp("wrong") / "tk_tile_softmax.cu"
    wrong.write_text(text.replace(WRONG_VECTOR[0], WRONG_VECTOR[1], 1))
    sources = {"stub": STUB, "wrong": wrong} | ({"solution": SOLUTION} if SOLUTION.exists() else {})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(thunderkittens.ENV_VAR, str(TK))
        patch.setenv("KCOURSE_CACHE", str(_session_cache()))
        with ThreadPoolExecutor(len(sources)) as pool:
            results = pool.map(
                lambda s: build.build_shared_library(s, None, requires=["thunderkittens"], device_only=not HAS_GPU),
                sources.values(),
            )
            return dict(zip(sources, results)) | {"wrong_source": wrong}


@pytest.mark.slow
def test_the_stub_and_the_solution_compile_for_sm_90a_without_spills(builds):
    for name in ("stub", "solution"):
        if name in builds:
            assert builds[name].ok and builds[name].arch == "sm_90a", builds[name].log
    if "solution" in builds:
        kernels = builds["solution"].resources
        assert len(kernels) == 2 and not any(k["spill_stores"] for k in kernels), kernels


@pytest.mark.slow
def test_a_thunderkittens_type_error_is_shown_at_the_learners_line(builds):
    built, source = builds["wrong"], builds["wrong_source"]
    line = 1 + source.read_text().splitlines().index("    warp::load(a, xs[w]); warp::row_max(m, a);")
    assert not built.ok and not built.skipped
    lines = built.log.splitlines()
    assert lines[0] == f"tk_tile_softmax.cu:{line}: error: static assertion failed", built.log
    assert lines[1].startswith("    in reductions.cuh:") and "col_vec_layout" in lines[1]
    assert lines[2] == "    instantiated from:" and any(
        "row_max [" in l and f"(tk_tile_softmax.cu:{line})" in l for l in lines[3:7]
    )
    assert "the whole compiler output: " in lines[-1] and len(lines) <= 10
    assert Path(lines[-1].split("the whole compiler output: ")[1].rstrip(")")).is_file()
    assert build.failure_message(source, built.log).splitlines()[0] == (
        f"tk_tile_softmax.cu did not compile: tk_tile_softmax.cu:{line}: error: static assertion failed"
    )


def test_a_plain_error_keeps_its_lines_and_a_library_error_outside_the_file_is_left_alone():
    plain = '/w/x.cu(5): error: identifier "nope" is undefined\n      nope();\n      ^\n\n1 error detected\n'
    assert nvcc_errors.condense(plain, Path("/w/x.cu"), None) is None  # no instantiation chain: shown as it is
    elsewhere = (
        "/tk/a.cuh(3): error: static assertion failed\n          detected during:\n"
        '            instantiation of "void f<T>() [with T=int]" at line 9 of /tk/b.cuh\n'
    )
    assert nvcc_errors.condense(elsewhere, Path("/w/x.cu"), None) is None


@pytest.mark.slow
@needs_tk
@pytest.mark.nvcc
@pytest.mark.solutions
def test_on_a_cpu_the_grade_compiles_for_sm_90a_and_skips_the_run(with_tk, builds):
    result = grade(resolve(("tk_tile_softmax",)), source="solutions", seed=3, record=False)
    build_check = next(c for c in result.checks if c.name == "build")
    assert build_check.status == "passed" and "compiled for sm_90a" in build_check.message
    if not torch.cuda.is_available():
        assert numerics(result).status == "skipped" and numerics(result).details["code"] == "no_gpu"


# --- the classic mistakes, played in torch on the spec's cases --------------------------------------------


def _softmax_rows(s: torch.Tensor, subtract_max: bool = True) -> torch.Tensor:
    m = s.amax(dim=-1, keepdim=True) if subtract_max else 0
    e = torch.exp(s - m)
    return e / e.sum(dim=-1, keepdim=True)


def honest(t, p):
    t["out"].copy_(_softmax_rows(t["x"].float() + t["y"].float()))


def added_in_bf16(t, p):  # x + y rounded to bf16 before the float32 softmax
    t["out"].copy_(_softmax_rows((t["x"] + t["y"]).float()))


def no_row_max(t, p):
    t["out"].copy_(_softmax_rows(t["x"].float() + t["y"].float(), subtract_max=False))


def _first_rows(t, rows: int) -> None:  # only these rows computed: the others keep the grader's poison
    t["out"][:rows].copy_(_softmax_rows(t["x"][:rows].float() + t["y"][:rows].float()))


def whole_tiles_only(t, p):  # tiles = rows / 16: the partial last tile is never computed
    _first_rows(t, 16 * (p["rows"] // 16))


def blocks_rounded_down(t, p):  # blocks = tiles / 4: the last block's tiles are never computed
    _first_rows(t, 64 * (-(-p["rows"] // 16) // 4))


def test_an_honest_float32_kernel_passes_every_case():
    for case in SPEC.cases:
        if case.params["rows"] < 20_000:  # the two large cases are slow on the CPU and add nothing here
            assert verdict(SPEC, case, honest) == "ok", case.label()


@pytest.mark.parametrize(
    "play, case_rows, codes",
    [
        (added_in_bf16, 259, ("mismatch",)),
        (no_row_max, 259, ("nan", "mismatch")),
        (whole_tiles_only, 37, ("partial_write",)),
        (whole_tiles_only, 1, ("not_written",)),
        (blocks_rounded_down, 1_001, ("partial_write",)),
    ],
)
def test_each_classic_mistake_fails_on_the_case_built_for_it(play, case_rows, codes):
    case = next(c for c in SPEC.cases if c.params["rows"] == case_rows)
    assert verdict(SPEC, case, play) in codes, play.__name__


# --- on a Hopper GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
def test_the_solution_passes_near_copy_bandwidth_beside_torch(with_tk):
    result = grade(resolve(("tk_tile_softmax",)), source="solutions", seed=5, record=False)
    print(f"\ntk_tile_softmax on {torch.cuda.get_device_name()}: {figures(result)}")
    assert result.status == "passed", result.verdict
    largest = result.timings[-1]
    assert largest.roofline_pct >= 85 and largest.learner_rate > largest.torch_rate, figures(result)


@pytest.mark.gpu
def test_the_stub_compiles_runs_and_fails_numerics_on_the_gpu(with_tk):
    result = grade(resolve(("tk_tile_softmax",)), source="stubs", seed=5, record=False, quick=True)
    check = next(c for c in result.checks if c.status in ("failed", "error"))
    assert check.name == "numerics" and check.details.get("code") == "not_written", result.verdict
