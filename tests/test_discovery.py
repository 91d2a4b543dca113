import pytest

from grader.core.discovery import ResolveError, resolve


def test_week_and_id_resolve_through_the_default_plan():
    target = resolve(("week2", "reduction"))
    assert (target.spec.id, target.variant.lang, target.unit, target.plan) == (
        "reduction",
        "cuda",
        "week2",
        "cuda-11-week",
    )


def test_the_plan_picks_the_language_of_an_exercise_in_two_languages():
    assert resolve(("week1", "vector_add")).variant.kind == "cuda_host"
    assert resolve(("week4", "vector_add")).variant.kind == "triton"
    assert resolve(("day2", "vector_add"), plan_id="triton-5-day").variant.kind == "triton"


def test_a_bare_id_in_two_languages_asks_for_lang():
    with pytest.raises(ResolveError, match=r"--lang cuda\|triton"):
        resolve(("vector_add",))
    assert resolve(("vector_add",), lang="triton").variant.lang == "triton"


def test_unknown_exercise_suggests_the_nearest():
    with pytest.raises(ResolveError, match=r"unknown exercise 'reducton'\. Did you mean 'reduction'\?.*Known: "):
        resolve(("reducton",))


def test_unknown_week_lists_what_exists():
    with pytest.raises(ResolveError, match=r"has no 'week22'\. Did you mean 'week2'\?"):
        resolve(("week22", "reduction"))


def test_a_day_the_default_plan_lacks_resolves_in_the_plan_that_lists_the_exercise_there():
    assert resolve(("day12", "softmax")).plan == "challenge-100-day"  # `kcourse grade day12 softmax`
    assert resolve(("day2", "vector_add")).plan == "triton-5-day"  # the 100-day plan's day 2 is device functions
    with pytest.raises(ResolveError, match="day2 of 'challenge-100-day' has no exercise 'vector_add'"):
        resolve(("day2", "vector_add"), plan_id="challenge-100-day")  # --plan is obeyed, never second-guessed
    with pytest.raises(ResolveError, match="challenge-100-day's: matrix_add, matrix_transform; triton-5-day's"):
        resolve(("day3", "softmax"))  # two plans have a day 3, neither with softmax: both are listed
    with pytest.raises(ResolveError, match="no exercise to grade: `kcourse progress --plan challenge-100-day`"):
        resolve(("day99", "anything"))  # the portfolio


def test_exercise_not_in_that_week_names_the_week_and_its_exercises():
    with pytest.raises(
        ResolveError, match=r"week2 of 'cuda-11-week' has no exercise 'softmax'.*Known: matmul, reduction"
    ):
        resolve(("week2", "softmax"))


def test_planned_but_unwritten_topic_is_reported_as_planned(tmp_path, monkeypatch):
    from grader.core import discovery, plans

    (tmp_path / "p.toml").write_text('id = "p"\n[[units]]\nkey = "day1"\ntitle = "x"\nplanned = ["a kernel to come"]\n')
    monkeypatch.setattr(discovery, "load_plans", lambda: plans.load_plans(tmp_path))  # the kit's plans have none left
    with pytest.raises(ResolveError, match="not written yet"):
        resolve(("day1", "kernel"), plan_id="p")


def test_unknown_plan_suggests_the_nearest():
    with pytest.raises(ResolveError, match=r"unknown plan 'triton-5-days'\. Did you mean 'triton-5-day'\?"):
        resolve(("day2", "softmax"), plan_id="triton-5-days")


def test_finding_an_exercise_does_not_import_torch():
    """`kcourse grade` resolves the exercise, then starts the worker, then imports torch: the worker's start-up
    (torch and a CUDA context, ~4 s) overlaps the grader's torch import only if resolving (every spec loaded
    and validated) leaves torch alone. It once did not (a spec check imported grader.checks.inputs), which cost every
    one-shot grade the import, ~2 s on an H200."""
    import subprocess
    import sys

    code = (
        "import sys; from grader.core.discovery import resolve, all_targets; resolve(['week2', 'reduction']); "
        "all_targets(); import grader.run.early; print('torch' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"


def test_without_a_gpu_the_interpreters_and_the_emulators_workers_start_early_and_a_torch_operator_gets_none(
    monkeypatch,
):
    """The early worker overlaps its torch import with the grader's on a CPU machine too (a one-shot Triton
    grade 10 s -> 4 s on two cores), the CUDA emulator's as well; a torch operator there is only compiled."""
    from grader import cuda_cpu
    from grader.run import sandbox
    from grader.toolchain import build

    monkeypatch.setattr(build, "gpu_arch", lambda: None)
    monkeypatch.setattr(cuda_cpu, "mode", lambda: (True, "CPU emulation"))
    started = []
    imported = []
    monkeypatch.setattr(
        sandbox,
        "Child",
        lambda device, env, imports=None: started.append((device, env)) or imported.append(imports) or device,
    )
    assert sandbox.early_child("triton", ["torch._dynamo"]) == "cpu"
    assert started == [("cpu", {"KCOURSE_CHILD_PREWARM": "triton"})] and imported == [["torch._dynamo"]]
    assert sandbox.early_child("cuda") == "cpu" and started[-1] == ("cpu", cuda_cpu.child_env())
    assert sandbox.early_child("torch_op") is None
