"""attention_patterns (100-day plan, day 45): flash attention under a sliding window and under a document mask,
two entry points of one Triton file, each a version graded against its own function of reference.py.

What the grader grew for it: a version may carry its own work model (`flops` under [variants.*]), since the
two masks leave different numbers of (query, key) pairs visible on the same cases; the speed record counts
the version's own.

CPU: the spec (each version's FLOPs are exactly its visible pairs at every timed size), the document ids,
the reference; a real grade of each version of the solution passes and the stub fails; each classic mistake
(the solution with a line changed) fails its case with the message a learner reads and passes a plain one,
judged in this process under the interpreter; the solution never reads a key block outside its query block's
range, where the plain loop of ladder step 1 (tests/fixtures/submissions/attention_patterns_mask_every_block.py)
does. GPU (`python -m pytest -m gpu -s tests/test_attention_patterns.py`): each version's grade with its
figures beside SDPA's materialised mask (and FlexAttention's, where torch has it), the stub failing there, and
the step-1 kernel passing numerics but failing the speed bar. The classic mistakes' full grades (on the CPU and on
a GPU) are the spec's [[mistakes]], graded by tests/test_exercise_mistakes.py."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import ROOT, submission
from interpreted import interpreter_on, load_interpreted, load_module
from interpreted_kernels import case_named
from triton_judging import judge

from grader.checks import speed
from grader.checks.checking import Comparison
from grader.checks.inputs import _reference_module, generate
from grader.core import exprs
from grader.core.discovery import discover_exercises, resolve
from grader.core.spec import SpecError, load_spec
from grader.run.grade import grade

SPEC = discover_exercises()["attention_patterns"]
SOLUTION = ROOT / "solutions" / "attention_patterns" / "attention_patterns.py"
VERSIONS = ["sliding_window", "document_mask"]
ONE_KEY = "B=2 H=3 N=17 d=64 dtype=float16 W=1 doc_a=1 doc_b=5"  # W = 1; documents of 1 and 5 tokens
CAUSAL = "B=1 H=2 N=100 d=128 dtype=float16 W=1000 doc_a=1000 doc_b=1"  # W >= N, one document: plain causal
SHARP = "B=1 H=2 N=333 d=64 dtype=float16 W=37 doc_a=45 doc_b=83 (q scale=30.0)"
PLAIN = "B=2 H=1 N=150 d=64 dtype=float16 W=99 doc_a=1 doc_b=70 (k layout=row_slice; v layout=row_slice)"

# name: (version, [(the solution's text, the mistaken text)], the case it fails, what its message says, a case it passes)
MISTAKES = {
    # i - W <= j: W + 1 keys, two where W = 1
    "window_off_by_one": (
        "sliding_window",
        [("return tl.maximum(i - W + 1, 0)", "return tl.maximum(i - W, 0)")],
        ONE_KEY,
        "wrong",
        CAUSAL,
    ),
    # plain causal: every document sees the ones before it
    "documents_ignored": (
        "document_mask",
        [("    _launch(q, k, v, out, starts, 0)", "    _launch(q, k, v, out, None, n_ctx)")],
        ONE_KEY,
        "wrong",
        CAUSAL,
    ),
    # exp of the raw scores: overflows at scores of std 30
    "no_max_subtraction": (
        "sliding_window",
        [("m_new = tl.maximum(m_i, tl.max(qk, 1))", "m_new = tl.zeros_like(m_i)")],
        SHARP,
        " NaN (first at index ",
        PLAIN,
    ),
    # exp(-inf - -inf) for a row that has seen no visible key yet (row 16 in the first 16-key block at W = 1)
    "no_empty_row_guard": (
        "sliding_window",
        [('m_use = tl.where(m_new == -float("inf"), 0.0, m_new)', "m_use = m_new")],
        ONE_KEY,
        " NaN (first at index ",
        CAUSAL,
    ),
    # the loop started where the block's last row starts: its earlier rows lose their first keys
    "skip_from_the_last_row": (
        "document_mask",
        [("start = (lo_first // BLOCK_N) * BLOCK_N", "start = (lo_last // BLOCK_N) * BLOCK_N")],
        SHARP,
        "wrong",
        CAUSAL,
    ),
}


def mistaken(name: str) -> str:
    text = SOLUTION.read_text()
    for old, new in MISTAKES[name][1]:
        assert old in text, f"{name}: {old!r} is not in the solution: update MISTAKES"
        text = text.replace(old, new)
    return text


def judged(version: str, entry, label: str, seed: int = 7) -> Comparison:
    """The grader's comparison for `entry` on every trial of the case labelled `label`: OK or the first failure."""
    return judge(SPEC, entry, case_named(SPEC, label), seed, version=version)


@pytest.fixture(scope="module")
def solution():
    return load_interpreted(SOLUTION, "attention_patterns_solution")


def failing(result):
    return next(c for c in result.checks if c.status in ("failed", "error"))


# --- the spec, its inputs and its work model --------------------------------------------------------


def test_each_version_names_its_reference_its_arguments_and_its_own_flops():
    assert {v: (SPEC.variants[v].reference, [a.name for a in SPEC.variants[v].args]) for v in VERSIONS} == {
        "sliding_window": ("sliding_window", ["q", "k", "v", "out", "W"]),
        "document_mask": ("document_mask", ["q", "k", "v", "doc_ids", "out"]),
    }
    assert SPEC.performance.flops is None and all(SPEC.variants[v].flops for v in VERSIONS)
    assert next(t for t in SPEC.inputs if t.name == "doc_ids").dtype == "int32"
    assert all(c.gpu_only for c in SPEC.cases if c.dtype == "bfloat16")  # the interpreter's bf16 tl.dot is wrong
    windows = {c.params["W"] for c in SPEC.cases}
    assert 1 in windows and any(c.params["W"] >= c.params["N"] for c in SPEC.cases)
    assert {c.params["N"] for c in SPEC.performance.cases} == {4096, 8192}


def visible_pairs(version: str, case) -> int:
    """The (query, key) pairs the version's mask leaves visible, counted from its definition."""
    n = case.params["N"]
    if version == "sliding_window":
        return sum(min(i + 1, case.params["W"]) for i in range(n))
    ids = generate(SPEC, case, 3)["doc_ids"]
    lengths = torch.unique_consecutive(ids, return_counts=True)[1]
    return int((lengths * (lengths + 1) // 2).sum())


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_each_versions_flops_are_its_visible_pairs_at_every_timed_size(version):
    for case in SPEC.performance.cases:
        p = case.params
        want = 4 * p["B"] * p["H"] * p["d"] * visible_pairs(version, case)
        assert exprs.evaluate(SPEC.variants[version].flops, p) == want, case.label()
        assert want < 0.5 * 2 * p["B"] * p["H"] * p["d"] * p["N"] ** 2, case.label()  # under half of causal's


def test_the_speed_record_counts_the_version_timed_and_a_bad_expression_is_refused_at_load(tmp_path):
    case = SPEC.performance.cases[-1]
    device = {"matmul_tflops_bfloat16": 700.0}
    window = speed.work_and_ceiling(SPEC, SPEC.variants["sliding_window"], case, device)
    documents = speed.work_and_ceiling(SPEC, SPEC.variants["document_mask"], case, device)
    assert window[1:] == documents[1:] == (700.0, "TFLOP/s")
    assert window[0] * 1e12 == pytest.approx(exprs.evaluate(SPEC.variants["sliding_window"].flops, case.params))
    assert documents[0] > 1.5 * window[0]  # documents of 700 and 3396 tokens see more than a window of 1024
    folder = tmp_path / "ex"
    folder.mkdir()
    (folder / "reference.py").write_text("def reference(x):\n    return x\n")
    (folder / "spec.toml").write_text(
        'id = "ex"\n[variants.triton]\nstub = "k.py"\nentry = "f"\nargs = ["x", "y"]\nflops = "2 * n * m"\n'
        '[inputs.x]\nshape = ["n"]\n[outputs.y]\nshape = ["n"]\n[[cases]]\nn = 3\n[tolerance.float32]\natol = 0\n'
        'rtol = 0\n[performance]\nbound = "compute"\n[[performance.cases]]\nn = 1024\n'
    )
    with pytest.raises(SpecError, match=r"variants.triton.flops = '2 \* n \* m': unknown name 'm'"):
        load_spec(folder)


def test_document_ids_are_non_decreasing_runs_of_the_cases_lengths_not_0_1_2():
    case = case_named(SPEC, SHARP)
    for trial in (0, 1):
        ids = generate(SPEC, case, 5, trial)["doc_ids"]
        assert ids.dtype == torch.int32 and ids.shape == (333,)
        assert bool((ids[1:] >= ids[:-1]).all()) and int(ids[0]) > 0
        values, lengths = torch.unique_consecutive(ids, return_counts=True)
        assert lengths.tolist() == [45, 83, 45, 83, 45, 32]
        assert values.tolist() != list(range(len(values)))


def test_the_reference_is_causal_at_w_at_least_n_and_v_itself_at_w_1():
    module = _reference_module(SPEC.folder / "reference.py")
    q, k, v = (torch.randn(2, 3, 300, 16, dtype=torch.float64) for _ in range(3))
    ids = torch.full((300,), 7, dtype=torch.int32)
    causal = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(module.sliding_window(q, k, v, ids, W=300), causal, atol=1e-12)
    assert torch.allclose(module.document_mask(q, k, v, ids), causal, atol=1e-12)
    assert torch.allclose(module.sliding_window(q, k, v, ids, W=1), v, atol=1e-12)
    one_token_documents = torch.arange(300, dtype=torch.int32) * 2
    assert torch.allclose(module.document_mask(q, k, v, one_token_documents), v, atol=1e-12)


# --- the learner's side: a real grade of each version, the stub, the classic mistakes ---------------


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_the_stub_fails_each_version_as_not_implemented(version):
    check = failing(grade(resolve(("attention_patterns",), lang=version), seed=5, record=False, quick=True))
    assert check.name == "numerics" and check.details["code"] == "not_implemented", check.message
    assert f"launch it in {version}()" in check.message


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_classic_mistake_fails_its_case_with_the_learners_message_and_passes_a_plain_one(tmp_path, name):
    version, _, failing_case, says, passing_case = MISTAKES[name]
    path = tmp_path / f"attention_patterns_{name}.py"
    path.write_text(mistaken(name))
    entry = getattr(load_interpreted(path, f"attention_patterns_{name}"), version)
    result = judged(version, entry, failing_case)
    assert not result.ok and result.code == "mismatch"
    assert result.message.startswith(failing_case) and says in result.message, result.message
    assert judged(version, entry, passing_case).ok


@pytest.mark.solutions
def test_the_solution_never_reads_a_key_block_its_query_block_cannot_see(solution):
    """A NaN value at key 3 spreads to every row whose program loads key 3's block (p = 0 times NaN is NaN): with
    the solution only rows near key 3 (interpreter blocks: 32 queries, 16 keys); with ladder step 1, every row."""
    plain = load_interpreted(submission("attention_patterns_mask_every_block.py"), "attention_patterns_every_block")
    q, k, v = (torch.randn(1, 1, 256, 16, dtype=torch.float16) for _ in range(3))
    v[..., 3, :] = float("nan")
    ids = torch.repeat_interleave(torch.tensor([5, 9], dtype=torch.int32), torch.tensor([40, 216]))
    calls = {
        "window": lambda m, out: m.sliding_window(q, k, v, out, 20),
        "documents": lambda m, out: m.document_mask(q, k, v, ids, out),
    }
    for what, call in calls.items():
        nan_rows = {}
        for who, module in (("solution", solution), ("step 1", plain)):
            out = torch.empty_like(q)
            with interpreter_on():
                call(module, out)
            nan_rows[who] = torch.isnan(out[0, 0]).any(-1).nonzero().flatten().tolist()
        reach = 20 if what == "window" else 40  # the rows that see key 3
        assert nan_rows["solution"] and max(nan_rows["solution"]) < 3 + reach + 32 + 16, (what, nan_rows["solution"])
        assert max(nan_rows["step 1"]) == 255, what


# --- GPU ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_passes_its_grade_on_the_gpu_with_its_figures(version):
    from grader.checks import memory

    result = grade(resolve(("attention_patterns",), lang=version), source="solutions", seed=3, record=False)
    assert result.status == "passed", result.verdict
    for t in result.timings:
        if t.learner_ms is not None:  # the sizes before the verdict's are run for their memory alone
            print(
                f"\nattention_patterns --lang {version} {t.case}: you {t.learner_ms:.4g} ms {t.learner_rate:.4g} "
                f"TFLOP/s (useful), torch (SDPA, mask materialised) {t.torch_ms:.4g} ms {t.torch_rate:.4g} TFLOP/s; "
                f"roofline {t.roofline_pct:.0f}%; extra memory {memory.size_text(t.learner_extra_bytes)}"
            )


@pytest.mark.gpu
@pytest.mark.parametrize("version", VERSIONS)
def test_the_stub_fails_every_version_on_the_gpu(version):
    check = failing(grade(resolve(("attention_patterns",), lang=version), seed=3, record=False, quick=True))
    assert check.details["code"] == "not_implemented", check.message


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("version", VERSIONS)
def test_masking_every_block_passes_numerics_and_fails_the_speed_bar(version):
    result = grade(
        resolve(("attention_patterns",), lang=version),
        submission=submission("attention_patterns_mask_every_block.py"),
        seed=3,
        record=False,
        timed_sizes="verdict",  # as `kcourse grade` does: the speed verdict's size alone timed
    )
    checks = {c.name: c for c in result.checks}
    assert checks["numerics"].status == "passed", checks["numerics"].message
    assert checks["speed"].status == "failed" and checks["speed"].details["code"] == "slow", checks["speed"].message
    print(f"\n{version}, every block masked: {checks['speed'].message}")


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.slow  # a frontier benchmark at full size, the GPU held alone for tens of seconds: the whole GPU suite
def test_the_window_beats_sdpa_with_its_mask_materialised_at_the_timed_size():
    """The anchor the README quotes: SDPA computes all N^2 scores. FlexAttention's figure, where torch has it,
    is printed beside (it skips blocks too, once compiled)."""
    from grader.child import timing

    module = load_module(SOLUTION, "attention_patterns_solution_gpu")
    reference = _reference_module(SPEC.folder / "reference.py")
    B, H, N, d, W = 2, 16, 8192, 128, 1024
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ids = torch.zeros(N, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    contestants = {
        "solution": lambda: module.sliding_window(q, k, v, out, W),
        "sdpa, mask materialised": lambda: reference.sliding_window(q, k, v, ids, W=W),
    }
    contestants.update(flex_attention(q, k, v, W))
    module.sliding_window(q, k, v, out, W)
    assert torch.allclose(out.float(), reference.sliding_window(q, k, v, ids, W=W).float(), atol=2e-2, rtol=2e-2)
    measured = timing.time_alternating(contestants)
    flops = 4 * B * H * d * (N * W - W * (W - 1) / 2)
    for who, m in measured.items():
        print(
            f"\nwindow {W} of {N}, {torch.cuda.get_device_name()}: {who} {m['median_ms']:.4g} ms, "
            f"{flops / m['median_ms'] / 1e9:.4g} TFLOP/s useful"
        )
    assert measured["solution"]["median_ms"] < measured["sdpa, mask materialised"]["median_ms"]


def flex_attention(q, k, v, window: int) -> dict:
    """FlexAttention with the window as a block mask, compiled; empty where this torch has none."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask
        from torch.nn.attention.flex_attention import flex_attention as flex
    except ImportError:
        return {}
    n, scale = q.shape[2], 1 / math.sqrt(q.shape[-1])
    try:
        block_mask = create_block_mask(lambda b, h, i, j: (j <= i) & (j > i - window), None, None, n, n, device="cuda")
        compiled = torch.compile(flex)
        compiled(q, k, v, block_mask=block_mask, scale=scale)  # compile outside the timing
    except Exception as exc:  # a figure for the README, not a verdict: say why it is missing
        print(f"\nflex_attention not timed: {type(exc).__name__}: {exc}")
        return {}
    return {"flex_attention": lambda: compiled(q, k, v, block_mask=block_mask, scale=scale)}
