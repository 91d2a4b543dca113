"""`kcourse compare attention`: every attention implementation the learner graded, over sequence lengths,
beside torch's SDPA; the week-10 report's tables and plots, and the week-11 summary of everything.

CPU: which implementations take part (by their spec, gated on their latest grade), the record and the
tables from faked child measurements, the reports and their charts, the CLI's "needs a GPU" message.
GPU (`python -m pytest -m gpu -s tests/test_compare_attention.py`): the real sweep over the solutions."""

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT
from test_reports import _red_pixels, env_record, grade_record

from grader.cli import main
from grader.commands import compare_attention
from grader.core import store
from grader.core.discovery import Target
from grader.core.job import Job
from grader.core.records import Check, GradeResult
from grader.core.spec import load_spec
from grader.reports import reporting

H100 = {"name": "NVIDIA H100 80GB HBM3", "copy_gbps": 3002.0, "matmul_tflops_float16": 700.0}


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def target(exercise: str, lang: str = "triton") -> Target:
    return next(t for t in compare_attention.attention_targets() if t.key == f"{exercise}:{lang}")


def graded(exercise: str, status: str, lang: str = "triton", file: str | None = None, numerics: str | None = None):
    """A grade of the exercise's own file (or `file`) with this status, as `kcourse grade` records it."""
    from grader.run.grade import learner_file

    path = file or compare_attention._relative(learner_file(target(exercise, lang), "learner", None))
    store.append(
        {
            "kind": "grade",
            "exercise": exercise,
            "lang": lang,
            "source": "learner",
            "file": path,
            "status": status,
            "verdict": "size 17: 3 of 3264 elements of out wrong" if status == "failed" else "passed",
            "checks": [{"name": "numerics", "status": numerics or status, "message": ""}],
        }
    )


# --- which implementations take part ---------------------------------------------------------------------


def write_spec(folder: Path, inputs: str, outputs: str) -> Path:
    folder.mkdir()
    (folder / "spec.toml").write_text(
        f'id = "{folder.name}"\n[variants.triton]\nstub = "a.py"\nentry = "f"\nargs = ["q"]\n{inputs}{outputs}'
        "[[cases]]\nB = 1\nH = 1\nN = 3\nd = 16\n[tolerance.float32]\natol = 0\nrtol = 0\n"
    )
    return folder


QKV = "".join(f'[inputs.{n}]\nshape = ["B", "H", "N", "d"]\n' for n in "qkv")


def test_an_exercise_joins_the_sweep_by_its_spec_alone(tmp_path):
    out = '[outputs.out]\nshape = ["B", "H", "N", "d"]\n'
    lse = '[outputs.lse]\nshape = ["B", "H", "N"]\n'
    assert compare_attention.is_attention(load_spec(write_spec(tmp_path / "a", QKV, out + lse)))
    assert not compare_attention.is_attention(load_spec(write_spec(tmp_path / "b", QKV, lse)))  # no `out`
    only_q = '[inputs.q]\nshape = ["B", "H", "N", "d"]\n'
    assert not compare_attention.is_attention(load_spec(write_spec(tmp_path / "c", only_q, out)))
    assert not compare_attention.is_attention(load_spec(ROOT / "exercises" / "softmax"))


def test_the_kits_attention_exercises_take_part_in_the_order_the_plan_teaches_them():
    keys = [t.key for t in compare_attention.attention_targets()]
    assert keys[:2] == ["naive_attention:triton", "flash_attention_v1:triton"]  # week 6, then week 7
    assert all(load_spec(ROOT / "exercises" / k.split(":")[0]).outputs[0].name == "out" for k in keys)
    assert not any(k.startswith(("softmax", "matmul", "layer_norm")) for k in keys)


def test_only_files_whose_latest_grade_passed_numerics_take_part_the_others_say_why():
    graded("naive_attention", "passed")
    graded("flash_attention_v1", "passed")
    graded("flash_attention_v1", "failed")  # the latest grade counts, not the best
    reasons = {c.target.key: c.reason for c in compare_attention.contestants("learner")}
    assert reasons["naive_attention:triton"] == ""
    assert reasons["flash_attention_v1:triton"].startswith("its latest grade did not pass numerics (failed: size 17")
    assert "run `kcourse grade flash_attention_v1" in reasons["flash_attention_v1:triton"]
    others = [r for k, r in reasons.items() if not k.startswith(("naive", "flash_attention_v1:triton"))]
    assert all(r.startswith("not graded yet: run `kcourse grade ") for r in others)


def test_a_passing_grade_of_another_file_or_numerics_skipped_does_not_admit_the_exercise_file():
    graded("naive_attention", "passed", file="/home/me/try.py")  # `kcourse grade naive_attention --file try.py`
    graded("flash_attention_v1", "skipped", numerics="skipped")  # e.g. a CUDA file only compiled here
    reasons = {c.target.key: c.reason for c in compare_attention.contestants("learner")}
    assert reasons["naive_attention:triton"].startswith(
        "not graded yet (your latest grade was of try.py; the sweep runs "
        "the exercise's own file exercises/naive_attention/naive_attention.py)"
    )
    assert reasons["flash_attention_v1:triton"].startswith("its latest grade did not pass numerics (skipped")


def test_a_version_that_does_not_take_the_sweeps_dtype_is_skipped_with_the_dtype_to_use(monkeypatch):
    import dataclasses

    from grader.core.spec import Variant

    if "dtypes" not in {f.name for f in dataclasses.fields(Variant)}:
        pytest.skip("this kit's specs cannot restrict a version's dtypes")
    graded("naive_attention", "passed")
    targets = [
        dataclasses.replace(t, variant=dataclasses.replace(t.variant, dtypes=["float16"]))
        for t in compare_attention.attention_targets()
    ]
    monkeypatch.setattr(compare_attention, "attention_targets", lambda: targets)
    reasons = {c.target.key: c.reason for c in compare_attention.contestants("learner", "bfloat16")}
    assert (
        reasons["naive_attention:triton"]
        == "this version takes float16 inputs, not bfloat16: compare with --dtype float16"
    )
    assert compare_attention.contestants("learner", "float16")[0].reason == ""


@pytest.mark.solutions
def test_the_solutions_are_not_gated_on_grades():
    everyone = compare_attention.contestants("solutions")
    with_file = [c for c in everyone if c.path.exists()]
    assert {c.target.key for c in with_file} >= {"naive_attention:triton", "flash_attention_v1:triton"}
    # no grade needed; only a version that takes other dtypes (tk_attention: bfloat16) says how to include it
    assert all(c.reason == "" or "compare with --dtype" in c.reason for c in with_file)
    assert all(c.reason == "" for c in with_file if c.target.key != "tk_attention:cuda")
    assert all("does not exist" in c.reason for c in everyone if not c.path.exists())


# --- the sweep, with the child's measurements faked ----------------------------------------------------------


def fake_points(exercise: str, lengths, oom_at=None, wrong_at=None, raise_at=None):
    """What the child reports: naive O(N^2) time and memory, flash O(N^2) time and no scratch; SDPA beside each."""
    naive = exercise == "naive_attention"
    points = []
    for n in lengths:
        if oom_at and n >= oom_at:
            points.append({"N": n, "error": "out of GPU memory"})
            break
        if raise_at == n:
            points.append({"N": n, "error": "IndexError: list index out of range"})
            continue
        scale = (n / 1024) ** 2
        points.append(
            {
                "N": n,
                "ms": scale * (1.0 if naive else 0.25),
                "sdpa_ms": scale * (0.1 if naive else 0.12),
                "runs": 20,
                "extra_bytes": 6 * 16 * n * n if naive else 0,
                "sdpa_extra_bytes": 4 * 16 * n,
                "max_abs_diff": 0.5 if wrong_at == n else 9e-4,
                "agrees": wrong_at != n,
                "error": "",
            }
        )
    return points


@pytest.fixture
def fake_child(monkeypatch):
    """grade() in mode attention_sweep replaced: exercise -> fake_points keywords (or "crash"); calls are kept."""
    calls, behaviour = [], {}

    def grade(
        target,
        source="learner",
        seed=None,
        mode="grade",
        record=True,
        job_extra=None,
        timeout_s=None,
        sanitize_code=True,
        **kwargs,
    ):
        calls.append(
            {
                "key": target.key,
                "source": source,
                "seed": seed,
                "mode": mode,
                "record": record,
                "job": job_extra["sweep"],
                "timeout_s": timeout_s,
                "sanitize": sanitize_code,
            }
        )
        result = GradeResult(exercise=target.spec.id, lang=target.variant.lang, source=source, seed=seed)
        how = behaviour.get(target.spec.id, {})
        if how == "crash":
            result.add(Check("run", "failed", "your code crashed with SIGSEGV while timing N=2048 — a bad pointer?"))
            return result.finish()
        points = fake_points(target.spec.id, job_extra["sweep"]["lengths"], **how)
        stopped = next(
            (
                f"out of GPU memory at N={p['N']}: longer sequences skipped"
                for p in points
                if p["error"] == "out of GPU memory"
            ),
            "",
        )
        result.extra["attention_sweep"] = {"points": points, "stopped": stopped, "device": dict(H100)}
        result.add(Check("load", "passed", "loaded"))
        return result.finish()

    import grader.run.grade

    monkeypatch.setattr(grader.run.grade, "grade", grade)
    monkeypatch.setattr(grader.run.grade, "cuda_available", lambda: True)
    return calls, behaviour


def by_label(record):
    return {r["label"]: r for r in record["implementations"]}


def test_each_ready_implementation_runs_once_in_the_child_and_the_record_holds_the_figures(fake_child):
    calls, behaviour = fake_child
    graded("naive_attention", "passed")
    graded("flash_attention_v1", "passed")
    behaviour["naive_attention"] = {"oom_at": 16384}
    record = compare_attention.sweep("learner", seed=11)
    assert [c["key"] for c in calls] == [
        "naive_attention:triton",
        "flash_attention_v1:triton",
    ]  # the others: not graded
    assert all(
        c["mode"] == "attention_sweep" and not c["record"] and not c["sanitize"] and c["seed"] == 11 for c in calls
    )
    assert calls[0]["job"] == {
        "config": compare_attention.CONFIG,
        "lengths": list(compare_attention.LENGTHS),
        "budget_s": compare_attention.BUDGET_S,
    }
    assert calls[0]["timeout_s"] == target("naive_attention").variant.timeout_s * compare_attention.TIMEOUT_FACTOR
    assert store.latest("compare_attention") == record and record["device"] == H100["name"]
    assert record["matmul_tflops"] == 700.0 and (record["B"], record["H"], record["d"]) == (1, 16, 64)

    rows = by_label(record)
    naive, flash = rows["naive_attention (triton)"], rows["flash_attention_v1 (triton)"]
    assert naive["status"] == "timed" and naive["reason"] == "out of GPU memory at N=16384: longer sequences skipped"
    assert [p["N"] for p in naive["points"]] == list(compare_attention.LENGTHS)  # 16384: the OOM entry
    at_1024 = flash["points"][1]
    assert at_1024["tflops"] == pytest.approx(4 * 16 * 1024**2 * 64 / 0.25e-3 / 1e12)
    assert at_1024["vs_sdpa"] == pytest.approx(0.12 / 0.25)
    assert [r["status"] for r in record["implementations"][2:]] == ["skipped"] * (len(record["implementations"]) - 2)
    sdpa = {p["N"]: p for p in record["sdpa"]}
    assert sdpa[1024]["ms"] == pytest.approx((0.1 + 0.12) / 2)  # the median of the timings beside each
    assert sdpa[16384]["ms"] == pytest.approx(256 * 0.12)  # beside flash only: naive ran out of memory
    assert compare_attention.exit_status(record) == 0


def test_the_terminal_shows_time_rate_and_memory_tables_and_says_what_did_not_run(fake_child):
    _, behaviour = fake_child
    graded("naive_attention", "passed")
    graded("flash_attention_v1", "passed")
    behaviour["naive_attention"] = {"oom_at": 16384}
    text = compare_attention.format_attention(compare_attention.sweep("learner", seed=11))
    assert text.startswith("attention on NVIDIA H100 80GB HBM3: B=1 H=16 d=64 float16, no causal mask; seed 11")
    lines = text.splitlines()
    naive_rows = [line.split() for line in lines if line.startswith("naive_attention (triton)")]
    assert naive_rows[0][2:] == ["0.25", "1", "4", "16", "64", "OOM"]  # time (ms)
    assert naive_rows[2][2:] == ["25.2", "MB", "101", "MB", "403", "MB", "1.61", "GB", "6.44", "GB", "OOM"]
    flash_rate = [line.split() for line in lines if line.startswith("flash_attention_v1 (triton)")][1]
    assert flash_rate[2:] == ["17.2"] * 6  # 4 * 16 * 1024^2 * 64 FLOP in 0.25 ms
    assert [line for line in lines if line.startswith("torch SDPA")][0].split()[2] == "0.0275"
    assert "naive_attention (triton): out of GPU memory at N=16384: longer sequences skipped" in lines
    assert any(line.startswith("flash_attention_v2 (triton): skipped: not graded yet") for line in lines) or not any(
        t.spec.id == "flash_attention_v2" for t in compare_attention.attention_targets()
    )
    assert "`kcourse report week10` shows these tables and plots" in text


def test_a_wrong_answer_a_raising_length_or_a_crash_fails_the_sweep_and_is_marked(fake_child):
    _, behaviour = fake_child
    for exercise in ("naive_attention", "flash_attention_v1"):
        graded(exercise, "passed")
    behaviour["naive_attention"] = {"wrong_at": 8192, "raise_at": 16384}
    behaviour["flash_attention_v1"] = "crash"
    record = compare_attention.sweep("learner", seed=3)
    rows = by_label(record)
    assert rows["naive_attention (triton)"]["status"] == "failed"
    assert rows["flash_attention_v1 (triton)"] == {
        **rows["flash_attention_v1 (triton)"],
        "status": "failed",
        "points": [],
        "reason": "your code crashed with SIGSEGV while timing N=2048 — a bad pointer?",
    }
    assert compare_attention.exit_status(record) == 1
    text = compare_attention.format_attention(record)
    naive_time = next(line for line in text.splitlines() if line.startswith("naive_attention (triton)")).split()
    assert naive_time[-2:] == ["64*", "error"]
    assert "naive_attention (triton): N=16384: IndexError: list index out of range" in text
    assert "naive_attention (triton): * answer far from SDPA's at N=8192 (max |you − SDPA| 0.5)" in text
    assert "flash_attention_v1 (triton): failed: your code crashed with SIGSEGV" in text


def test_an_implementation_that_fits_at_no_length_is_skipped_not_timed(fake_child):
    _, behaviour = fake_child
    graded("naive_attention", "passed")
    behaviour["naive_attention"] = {"oom_at": 512}
    record = compare_attention.sweep("learner", lengths=(512, 1024))
    naive = by_label(record)["naive_attention (triton)"]
    assert (naive["status"], naive["reason"]) == ("skipped", "out of GPU memory at N=512: longer sequences skipped")
    assert record["sdpa"] == [] and compare_attention.exit_status(record) == 0


def test_with_nothing_ready_the_sweep_refuses_and_lists_why(fake_child):
    calls, _ = fake_child
    with pytest.raises(compare_attention.AttentionCompareError, match="nothing to compare") as caught:
        compare_attention.sweep("learner")
    assert "naive_attention (triton): not graded yet" in str(caught.value) and not calls
    assert store.latest("compare_attention") is None


# --- the command line ---------------------------------------------------------------------------------------


def test_on_a_machine_without_a_gpu_it_says_it_needs_one_and_records_nothing(monkeypatch):
    monkeypatch.setenv("KCOURSE_DEVICE", "cpu")
    graded("naive_attention", "passed")
    result = CliRunner().invoke(main, ["compare", "attention"])
    assert result.exit_code == 2
    assert (
        "kcourse compare attention times each implementation on an NVIDIA GPU, and none was found here" in result.output
    )
    assert "Nothing was timed or recorded" in result.output
    assert "  naive_attention (triton): ready" in result.output
    assert "  flash_attention_v1 (triton): not graded yet" in result.output
    assert store.latest("compare_attention") is None


@pytest.mark.solutions
def test_the_command_passes_the_sweeps_options_and_prints_the_tables(fake_child):
    calls, _ = fake_child
    result = run(
        "compare",
        "attention",
        "--source",
        "solutions",
        "--lengths",
        "256,1024",
        "--heads",
        "4",
        "--head-dim",
        "128",
        "--seed",
        "9",
    )
    assert result.exit_code == 0, result.output
    assert calls and all(c["source"] == "solutions" and c["seed"] == 9 for c in calls)
    assert calls[0]["job"]["config"] == {"B": 1, "H": 4, "d": 128, "dtype": "float16"}
    assert calls[0]["job"]["lengths"] == [256, 1024]
    assert "timed naive_attention (triton)" in result.output and "B=1 H=4 d=128 float16" in result.output
    assert store.latest("compare_attention")["source"] == "solutions"


def test_attention_options_and_files_are_usage_errors_where_they_do_not_belong(tmp_path):
    cu = tmp_path / "v1.cu"
    cu.write_text("")
    wrong = [
        (["compare", "attention", str(cu)], "takes no files or --lang"),
        (["compare", "reduction", str(cu), "--lengths", "512"], "--lengths: for `kcourse compare attention` only"),
        (["compare", "attention", "--lengths", "512,x"], "give positive sequence lengths"),
        (["compare", "attention", "--lengths", "0"], "give positive sequence lengths"),
        (["compare", "reduction"], "(or `kcourse compare attention` for every attention implementation"),
    ]
    for args, message in wrong:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and message in " ".join(result.output.split()), (args, result.output)


# --- the reports -----------------------------------------------------------------------------------------------


@pytest.fixture
def swept(fake_child):
    _, behaviour = fake_child
    graded("naive_attention", "passed")
    graded("flash_attention_v1", "passed")
    behaviour["naive_attention"] = {"oom_at": 16384}
    return compare_attention.sweep("learner", seed=11)


def test_week10_shows_the_three_tables_what_did_not_run_and_the_charts(swept, isolated_state):
    path = reporting.render("week10")
    assert path.name == "week10_attention.md"
    text = path.read_text()
    assert "## Attention: every implementation compared" in text
    assert "`kcourse compare attention` on NVIDIA H100 80GB HBM3" in text and "B=1, H=16, d=64, float16" in text
    header = "| implementation | N=512 | N=1024 | N=2048 | N=4096 | N=8192 | N=16384 |"
    assert text.count(header) == 3
    assert "| naive_attention (triton) | 0.25 | 1 | 4 | 16 | 64 | OOM |" in text
    assert "| flash_attention_v1 (triton) | 17.2 | 17.2 | 17.2 | 17.2 | 17.2 | 17.2 |" in text
    assert "| naive_attention (triton) | 25.2 MB | 101 MB | 403 MB | 1.61 GB | 6.44 GB | OOM |" in text
    assert "| torch SDPA | 32.8 kB |" in text and "cuBLAS matmul reaches 700 TFLOP/s" in text
    assert "- naive_attention (triton): out of GPU memory at N=16384: longer sequences skipped" in text
    reports = isolated_state / "reports"
    for name in ("attention_time.png", "attention_tflops.png", "attention_memory.png"):
        assert f"]({name})" in text
        assert _red_pixels(reports / name)[0] > 100, name  # the first implementation's line is drawn in red
    assert "<!-- notes:week10-1 -->" in text  # the week's question is still there


def test_week10_without_a_sweep_says_how_to_make_one(isolated_state):
    text = reporting.render("week10").read_text()
    assert "No attention comparison recorded yet: run `kcourse compare attention` on a GPU machine" in text
    assert not (isolated_state / "reports" / "attention_time.png").exists()


def test_another_week_shows_no_sweep_unless_its_plan_requires_one(swept, monkeypatch):
    assert "Attention: every implementation" not in reporting.render("week2").read_text()
    from grader.core.plans import Plan, Unit, load_plans

    plans = load_plans()
    plans["attention-bootcamp"] = Plan(
        id="attention-bootcamp",
        title="Attention",
        unit_name="day",
        units=[Unit("day42", "Compare attention", requires=["compare_attention"])],
    )
    monkeypatch.setattr(reporting, "load_plans", lambda: plans)
    text = reporting.render("day42", plan_id="attention-bootcamp").read_text()
    assert "| naive_attention (triton) | 0.25 | 1 | 4 | 16 | 64 | OOM |" in text


@pytest.mark.slow
def test_week11_summarises_every_best_grade_the_comparisons_the_sweep_and_keeps_the_questions(swept, isolated_state):
    store.append(env_record())
    store.append(grade_record("reduction", "cuda", "GB/s", ["n=1048576", "n=268435456"], 0.5))
    store.append(grade_record("matmul", "cuda", "TFLOP/s", ["M=1024 N=1024 K=1024", "M=4096 N=4096 K=4096"], 3.0))
    store.append(
        {
            "kind": "compare",
            "exercise": "reduction",
            "lang": "cuda",
            "seed": 3,
            "device": "NVIDIA H100 80GB HBM3",
            "case": "n=268435456",
            "unit": "GB/s",
            "rows": [
                {
                    "label": "interleaved.cu",
                    "numerics": "passed",
                    "ms": 2.0,
                    "rate": 537.0,
                    "roofline_pct": 18.0,
                    "ratio": 0.18,
                    "speed": "failed",
                    "verdict": "slow",
                    "solution_ms": 0.36,
                },
                {
                    "label": "shuffle.cu",
                    "numerics": "passed",
                    "ms": 0.4,
                    "rate": 2684.0,
                    "roofline_pct": 89.0,
                    "ratio": 0.9,
                    "speed": "passed",
                    "verdict": "passed",
                    "solution_ms": 0.36,
                },
            ],
        }
    )
    text = reporting.render("week11").read_text()
    assert "| reduction (cuda) | passed | n=268435456 | 1 | 200 GB/s | 43% | 0.80× | 0.8 | 0.9 | — |" in text
    assert "| matmul (cuda) | passed | M=4096 N=4096 K=4096 | 6 | 200 TFLOP/s | 43% | 0.80× | 4.8 | 5.4 | — |" in text
    assert "| naive_attention (triton) | passed | not timed |" in text  # graded, never timed (a record without timings)
    assert "Not graded yet: " in text and "softmax (triton)" in text.split("Not graded yet: ")[1].splitlines()[0]
    assert (
        "### reduction (cuda): 2 versions, timed at n=268435456" in text
        and "| shuffle.cu | passed | 0.4 | 2684 |" in text
    )
    assert "![reduction (cuda): versions compared](compare_reduction_cuda.png)" in text
    assert "| naive_attention (triton) | 0.25 | 1 | 4 | 16 | 64 | OOM |" in text and "](attention_memory.png)" in text
    assert (
        text.index("## Versions compared")
        < text.index("## Attention: every implementation")
        < text.index("## Questions")
    )
    for index in range(1, 5):
        assert f"<!-- notes:week11-{index} -->" in text
    assert "<!-- notes:week11 -->" in text and "![Roofline](roofline.png)" in text
    final = reporting.render("final").read_text()
    assert "## Attention: every implementation compared" in final and "](attention_tflops.png)" in final


OLD_SWEEPS = [
    {"kind": "compare_attention"},
    {
        "kind": "compare_attention",
        "implementations": "junk",
        "sdpa": None,
        "lengths": "all",
        "device": {},
        "at": "today",
    },
    {
        "kind": "compare_attention",
        "B": None,
        "implementations": [
            {
                "label": "naive_attention (triton)",
                "points": [{"N": 512, "ms": "fast"}, {"N": "x"}, "junk", {"error": "boom"}],
            },
            {},
            "junk",
        ],
        "sdpa": [{"N": 512, "ms": 0.1}, {}],
    },
]


@pytest.mark.parametrize("old", OLD_SWEEPS)
def test_a_partial_or_old_sweep_record_still_renders(old):
    store.append(old)
    for key in ("week10", "week11", "final"):
        text = reporting.render(key).read_text()
        assert "## Attention: every implementation compared" in text and "None" not in text and "Undefined" not in text


# --- the child's side, where it runs on the CPU ----------------------------------------------------------------


def test_each_length_is_the_specs_own_case_with_the_sweeps_sizes_and_no_causal_mask():
    from grader.child.worker_attention import accepts, sweep_case

    config = {"B": 2, "H": 4, "d": 128, "dtype": "bfloat16"}
    flash = sweep_case(load_spec(ROOT / "exercises" / "flash_attention_v1"), config, 4096)
    assert flash.params == {"B": 2, "H": 4, "N": 4096, "d": 128, "dtype": "bfloat16", "causal": False}
    naive = sweep_case(load_spec(ROOT / "exercises" / "naive_attention"), config, 512)
    assert naive.params == {"B": 2, "H": 4, "N": 512, "d": 128, "dtype": "bfloat16"} and naive.inputs == {}
    variant = load_spec(ROOT / "exercises" / "naive_attention").variants["triton"]
    assert accepts(variant, naive)


def test_agreement_with_sdpa_allows_rounding_and_never_nan_or_unwritten_outputs():
    import torch

    from grader.checks.inputs import poison
    from grader.child.worker_attention import agreement

    ref = torch.randn(2, 3, 17, 8).half()
    assert agreement(ref + 1e-3, ref, 2e-3, 1e-2)[1]
    worst, ok = agreement(ref + 0.1, ref, 2e-3, 1e-2)
    assert not ok and worst == pytest.approx(0.1, rel=0.05)
    unwritten = ref.clone()
    poison(unwritten[0, 0])
    assert agreement(unwritten, ref, 2e-3, 1e-2) == (None, False)


@pytest.fixture
def child_on_the_cpu(monkeypatch):
    """worker_attention.attention_sweep in this process on the CPU: timing and the memory probe faked (they
    need CUDA); returns a maker of the worker it reads (a plain namespace) for a variant kind and lengths."""
    import dataclasses
    import types

    from grader.checks import memory
    from grader.child import timing

    monkeypatch.setattr(
        timing,
        "time_alternating",
        lambda functions, budget_s: {
            who: {"median_ms": 2.0 if who == "learner" else 1.0, "runs": 15, "spread": 0.0}
            for who in functions
            if functions[who]() is not False
        },
    )
    monkeypatch.setattr(memory, "peak_extra_bytes", lambda function, returns_outputs: (4096, function()))

    def make(kind, lengths):
        spec = load_spec(ROOT / "exercises" / "flash_attention_v1")
        spec.tolerance.setdefault("float32", spec.tolerance["float16"])  # this copy of the spec only
        variant = dataclasses.replace(spec.variants["triton"], kind=kind)
        return types.SimpleNamespace(
            spec=spec,
            variant=variant,
            tensor_device="cpu",
            device_info={"name": "CPU"},
            learner_path=Path("flash_attention_v1.py"),
            progress=lambda text: None,
            job=Job(
                seed=4,
                sweep={"config": {"B": 1, "H": 2, "d": 16, "dtype": "float32"}, "lengths": lengths, "budget_s": 0.1},
            ),
        )

    return make


def sdpa(tensors):
    import torch

    return torch.nn.functional.scaled_dot_product_attention(*(tensors[n] for n in "qkv"))


def test_the_childs_loop_times_each_length_and_stops_where_memory_runs_out(child_on_the_cpu):
    import torch

    from grader.child.worker_attention import attention_sweep

    seen = []

    def learner(tensors, params):
        seen.append(params)
        if params["N"] >= 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 17.00 GiB")
        tensors["out"].copy_(sdpa(tensors))

    found = attention_sweep(child_on_the_cpu("triton", [8, 33, 64, 128]), learner)
    assert [p["N"] for p in found["points"]] == [8, 33, 64] and found["device"] == {"name": "CPU"}
    assert found["points"][1] == {
        "N": 33,
        "ms": 2.0,
        "sdpa_ms": 1.0,
        "runs": 15,
        "extra_bytes": 4096,
        "sdpa_extra_bytes": 4096,
        "max_abs_diff": found["points"][1]["max_abs_diff"],
        "agrees": True,
        "error": "",
    }
    assert found["points"][2] == {"N": 64, "error": "out of GPU memory"}
    assert found["stopped"] == "out of GPU memory at N=64: longer sequences skipped"
    assert all(p["causal"] is False and p["H"] == 2 for p in seen) and 128 not in [p["N"] for p in seen]


def test_the_child_checks_what_a_torch_operator_returns_and_names_a_length_that_raised(child_on_the_cpu):
    from grader.child.worker_attention import attention_sweep

    def operator(tensors, params):  # kind torch_op: no output buffers are handed in; it returns `out`
        assert "out" not in tensors
        if params["N"] == 20:
            raise IndexError("list index out of range")
        return sdpa(tensors) + (1.0 if params["N"] == 40 else 0.0)

    found = attention_sweep(child_on_the_cpu("torch_op", [10, 20, 40]), operator)
    ok, raised, wrong = found["points"]
    assert ok["agrees"] is True and wrong["agrees"] is False and wrong["max_abs_diff"] == pytest.approx(1.0)
    assert raised == {"N": 20, "error": "IndexError: list index out of range"} and found["stopped"] == ""


# --- GPU: the real sweep ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.solutions
def test_the_sweep_times_every_solution_beside_sdpa_and_week10_renders_it(isolated_state):
    result = run("compare", "attention", "--source", "solutions", "--lengths", "512,1024,2048", "--seed", "5")
    print(result.output)  # `-s` shows the tables: each solution's ms and TFLOP/s against SDPA's
    assert result.exit_code == 0, result.output
    record = store.latest("compare_attention")
    rows = [r for r in record["implementations"] if r["status"] != "skipped"]
    assert {r["label"] for r in rows} >= {"naive_attention (triton)", "flash_attention_v1 (triton)"}
    for row in rows:
        assert row["status"] == "timed", row
        assert [p["N"] for p in row["points"]] == [512, 1024, 2048] and all(p["agrees"] for p in row["points"]), row
        assert all(p["ms"] > 0 and p["tflops"] > 0 for p in row["points"])
    naive = next(r for r in rows if r["exercise"] == "naive_attention")
    extra = {p["N"]: p["extra_bytes"] for p in naive["points"]}
    assert 3.0 < extra[2048] / extra[1024] < 5.0  # the N x N intermediates: 4x per doubling
    for flash in (r for r in rows if r["exercise"].startswith("flash")):
        limit = {p["N"]: 4 * 1 * 16 * p["N"] * (64 + 2) + 2**20 for p in flash["points"]}
        assert all(p["extra_bytes"] <= limit[p["N"]] for p in flash["points"]), flash
    assert len(record["sdpa"]) == 3 and all(p["ms"] > 0 for p in record["sdpa"])
    text = reporting.render("week10").read_text()
    assert "| torch SDPA |" in text and "](attention_time.png)" in text
    assert (isolated_state / "reports" / "attention_time.png").exists()
