"""Attention (naive_attention, flash_attention_v1) and the grader's peak-memory check they brought.

CPU: the spec's `max_extra_bytes`, the memory verdict on fake timing records, what the terminal and the
reports show. GPU (`python -m pytest -m gpu -s tests/test_attention.py`): the real measurement, a flash
kernel that holds N x N scores failing the check, naive attention's N^2 growth, the solution vs SDPA."""

from pathlib import Path

import pytest

from grader.checks import memory
from grader.core import store
from grader.core.records import FAILED, PASSED, SKIPPED, GradeResult, Timing
from grader.core.spec import SpecError, load_spec
from grader.reports import reporting
from grader.reports.console import format_timing

ROOT = Path(__file__).resolve().parent.parent
LIMIT = "4 * B * H * N * (d + 2) + 2**20"


def write_spec(folder: Path, performance: str) -> Path:
    folder.mkdir()
    (folder / "spec.toml").write_text(
        f'id = "{folder.name}"\n[variants.triton]\nstub = "a.py"\nentry = "f"\nargs = ["q", "out"]\n'
        '[inputs.q]\nshape = ["B", "H", "N", "d"]\n[outputs.out]\nshape = ["B", "H", "N", "d"]\n'
        "[[cases]]\nB = 1\nH = 1\nN = 3\nd = 16\n[tolerance.float32]\natol = 0\nrtol = 0\n" + performance
    )
    return folder


# --- the spec ------------------------------------------------------------------------------------
def test_a_spec_declares_a_memory_limit_as_an_expression_of_the_case(tmp_path):
    spec = load_spec(
        write_spec(
            tmp_path / "e",
            f'[performance]\nflops = "N"\nmax_extra_bytes = "{LIMIT}"\n'
            'memory_hint = "O(N)"\n[[performance.cases]]\nB = 1\nH = 4\nN = 8192\nd = 64\n',
        )
    )
    assert spec.performance.max_extra_bytes == LIMIT and spec.performance.memory_hint == "O(N)"
    assert load_spec(ROOT / "exercises" / "softmax").performance.max_extra_bytes is None  # no limit: none checked


def test_a_memory_limit_naming_an_unknown_dimension_is_refused_at_load(tmp_path):
    folder = write_spec(
        tmp_path / "e",
        '[performance]\nflops = "N"\nmax_extra_bytes = "4 * N * heads"\n'
        "[[performance.cases]]\nB = 1\nH = 4\nN = 64\nd = 64\n",
    )
    with pytest.raises(SpecError, match=r"max_extra_bytes = '4 \* N \* heads': unknown name 'heads'"):
        load_spec(folder)


def test_a_memory_limit_needs_timed_sizes(tmp_path):
    with pytest.raises(SpecError, match="needs \\[\\[performance.cases\\]\\]"):
        load_spec(write_spec(tmp_path / "e", '[performance]\nflops = "N"\nmax_extra_bytes = "N"\n'))


def test_the_attention_exercises_load_with_causal_as_a_case_parameter():
    flash = load_spec(ROOT / "exercises" / "flash_attention_v1")
    assert [a.name for a in flash.variants["triton"].args][-1] == "causal"
    assert {c.params["causal"] for c in flash.cases} == {True, False}
    assert {c.params["N"] for c in flash.cases} >= {1, 17, 1000, 1537}
    assert {c.params["d"] for c in flash.cases} == {64, 128}
    assert {c.dtype for c in flash.cases} == {"float16", "bfloat16"}
    assert all(c.gpu_only for c in flash.cases if c.dtype == "bfloat16")  # the interpreter's bf16 tl.dot is wrong
    assert flash.performance.max_extra_bytes
    naive = load_spec(ROOT / "exercises" / "naive_attention")
    assert [c.params["N"] for c in naive.performance.cases] == [512, 1024, 2048, 4096, 8192]
    assert naive.performance.max_extra_bytes is None  # its N x N memory is recorded, not refused


# --- the verdict, from fake records ----------------------------------------------------------------
FLASH = load_spec(ROOT / "exercises" / "flash_attention_v1")


def record(case, extra):
    return memory.annotate(Timing(case=case.label(), learner_ms=1.0), FLASH, case, {"learner": extra, "torch": 0}, 2)


def test_the_limit_is_evaluated_per_timed_size():
    first = FLASH.performance.cases[0]  # B=1 H=4 N=8192 d=64
    assert record(first, 0).extra_bytes_limit == 4 * 4 * 8192 * 66 + 2**20
    assert record(first, 0).learner_extra_bytes == 0.0 and record(first, 0).torch_extra_bytes == 0.0


def test_o_n_scratch_passes_and_the_message_lists_each_size():
    records = [record(c, 4 * c.params["B"] * c.params["H"] * c.params["N"] * 2) for c in FLASH.performance.cases]
    check = memory.verdict(FLASH, records)
    assert check.status == PASSED and check.name == "memory"
    assert "within the limit (O(N)" in check.message and "N=8192" in check.message


def test_n_by_n_scores_fail_with_the_size_the_limit_and_what_to_do():
    cases = FLASH.performance.cases
    scores = [4 * c.params["B"] * c.params["H"] * c.params["N"] ** 2 for c in cases]  # float32 S
    check = memory.verdict(FLASH, [record(c, s) for c, s in zip(cases, scores)])
    assert check.status == FAILED and check.details["code"] == "too_much_memory"
    assert check.message.startswith("your kernel allocated ")
    assert "beyond its inputs and outputs at B=1 H=4 N=8192" in check.message  # the worst against its limit
    assert "the limit is 9.7 MB (O(N) — do not materialise the N x N score matrix" in check.message
    assert "over the limit at 4 of 4 timed sizes" in check.message
    assert LIMIT in check.details["hint"]


def test_one_size_over_is_enough_to_fail():
    cases = FLASH.performance.cases
    records = [record(c, 0) for c in cases[:-1]] + [record(cases[-1], 10**12)]
    check = memory.verdict(FLASH, records)
    assert check.status == FAILED and "allocated 1 TB" in check.message and "over the limit at" not in check.message


def test_no_limit_no_check_and_garbage_figures_are_not_believed():
    softmax = load_spec(ROOT / "exercises" / "softmax")
    assert memory.verdict(softmax, [Timing(case="x", learner_extra_bytes=1e12)]) is None
    case = FLASH.performance.cases[0]
    forged = memory.annotate(Timing(case=case.label()), FLASH, case, {"learner": -5, "torch": "a lot"}, 2)
    assert forged.learner_extra_bytes is None and forged.torch_extra_bytes is None
    assert memory.verdict(FLASH, [forged]).status == SKIPPED


def test_without_a_gpu_or_with_quick_the_check_is_skipped_with_the_reason():
    assert memory.not_measured(FLASH, on_gpu=False).message.startswith("no GPU found: ")
    assert memory.not_measured(FLASH, on_gpu=True).message.startswith("--quick")
    assert memory.not_measured(load_spec(ROOT / "exercises" / "softmax"), on_gpu=False) is None


def test_sizes_read_as_people_write_them():
    assert [memory.size_text(b) for b in (0, 512, 9.7e6, 2.1e9)] == ["0 B", "512 B", "9.7 MB", "2.1 GB"]


# --- what the learner sees --------------------------------------------------------------------------
def test_the_timing_line_and_the_report_show_the_extra_memory(isolated_state):
    timing = Timing(
        case="B=1 H=8 N=8192 d=64 dtype=float16",
        learner_ms=3.0,
        runs=50,
        learner_extra_bytes=3.2e9,
        torch_extra_bytes=2.1e9,
        extra_bytes_limit=9.7e6,
    )
    assert "extra memory: you 3.2 GB (limit 9.7 MB), torch 2.1 GB" in format_timing(timing)
    old = Timing(case="M=4096", learner_ms=1.0, runs=5)  # records from before the measurement: nothing shown
    assert "extra memory" not in format_timing(old)
    result = GradeResult(exercise="naive_attention", lang="triton", source="learner", seed=1, device={"name": "GPU"})
    result.timings = [timing, old]
    store.append(result.finish().to_dict())
    text = reporting.render("final").read_text()
    assert "extra GPU memory: you (limit) / torch" in text
    assert "| 3,200.0 MB (9.7 MB) / 2,100.0 MB |" in text and "| — / — |" in text


# --- GPU: the real measurement ------------------------------------------------------------------------
@pytest.mark.gpu
def test_the_measurement_sees_scratch_and_not_what_was_live_before():
    import torch

    live = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")  # like the inputs: not counted

    def scratch():
        buffer = torch.empty(8 * 2**20, dtype=torch.uint8, device="cuda")
        del buffer
        return torch.zeros(2**20, dtype=torch.uint8, device="cuda")

    extra, result = memory.peak_extra_bytes(scratch, returns_outputs=False)
    assert extra == 8 * 2**20  # the 8 MiB buffer was freed before the 1 MiB result was made
    extra, _ = memory.peak_extra_bytes(
        lambda: torch.zeros(2**20, dtype=torch.uint8, device="cuda"), returns_outputs=True
    )
    assert extra == 0 and live.numel()


def materialising_flash(tmp_path: Path) -> Path:
    """The solution, plus the N x N float32 buffer a naive wrapper would allocate (never used)."""
    source = (ROOT / "solutions" / "flash_attention_v1" / "flash_attention_v1.py").read_text()
    marker = "    batch, heads, n_ctx, head_dim = q.shape\n"
    assert marker in source
    source = source.replace(
        marker,
        marker + "    scores = torch.empty((batch, heads, n_ctx, n_ctx), dtype=torch.float32, device=q.device)\n",
    )
    path = tmp_path / "flash_attention_v1.py"
    path.write_text(source)
    return path


@pytest.mark.gpu
@pytest.mark.solutions
def test_flash_solution_allocates_nothing_and_a_kernel_holding_the_scores_fails_memory(tmp_path):
    from grader.core.discovery import resolve
    from grader.run.grade import grade

    # Both files are graded from one folder, so they share its Triton cache (grade._box_id): the second grade's
    # kernels, the solution's own, are compiled once, by the first (a folder of its own compiled them again: the
    # tier's longest test, 414-546 s under the load).
    copy = tmp_path / "flash_attention_v1.py"
    copy.write_text((ROOT / "solutions" / "flash_attention_v1" / "flash_attention_v1.py").read_text())
    result = grade(resolve(("flash_attention_v1",)), submission=copy, seed=3)
    checks = {c.name: c for c in result.checks}
    assert result.status == PASSED, result.verdict
    assert checks["memory"].status == PASSED, checks["memory"].message
    for t in result.timings:
        if t.learner_ms is not None:  # the sizes before the verdict's are run for their memory alone
            print(
                f"\n{t.case}: you {t.learner_ms:.4g} ms {t.learner_rate:.4g} TFLOP/s, torch {t.torch_ms:.4g} ms "
                f"{t.torch_rate:.4g} TFLOP/s; extra memory you {memory.size_text(t.learner_extra_bytes)}, torch "
                f"{memory.size_text(t.torch_extra_bytes)} (limit {memory.size_text(t.extra_bytes_limit)})"
            )
        assert t.learner_extra_bytes < 2**20
    # as kcourse grade and watch do: every size but the verdict's is run for its memory alone, untimed
    bad = grade(
        resolve(("flash_attention_v1",)), submission=materialising_flash(tmp_path), seed=3, timed_sizes="verdict"
    )
    check = next(c for c in bad.checks if c.name == "memory")
    assert check.status == FAILED, check.message
    assert "beyond its inputs and outputs at B=" in check.message and "do not materialise" in check.message
    assert [t.learner_ms is None for t in bad.timings] == [True] * (len(bad.timings) - 1) + [False]
    print("\n" + check.message)


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.all_sizes  # the memory of each size against the one before
def test_naive_attention_memory_grows_as_n_squared():
    from grader.core.discovery import resolve
    from grader.run.grade import grade

    result = grade(resolve(("naive_attention",)), source="solutions", seed=3)
    assert result.status == PASSED, result.verdict
    extra = [t.learner_extra_bytes for t in result.timings]
    for t in result.timings:
        if t.learner_ms is not None:  # the sizes before the verdict's are run for their memory alone
            print(
                f"\n{t.case}: you {t.learner_ms:.4g} ms ({t.roofline_pct or 0:.0f}% of roofline), torch {t.torch_ms:.4g} ms; "
                f"extra memory you {memory.size_text(t.learner_extra_bytes)}, torch {memory.size_text(t.torch_extra_bytes)}"
            )
    assert all(3.5 < later / earlier < 4.5 for earlier, later in zip(extra, extra[1:])), extra
    n = 8192
    assert extra[-1] >= 6 * 8 * n * n  # S (float32) and P (float16) of 8 heads, both live during the softmax


@pytest.mark.bench
@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("causal", [False, True])
def test_flash_solution_against_sdpa_at_4x32x4096x128_bf16(causal):
    """The figure the v2 issue measures against (SDPA: about 594 TFLOP/s non-causal, 525 causal)."""
    import importlib.util

    import torch
    import torch.nn.functional as F
    import triton

    spec = importlib.util.spec_from_file_location(
        "flash_solution", ROOT / "solutions" / "flash_attention_v1" / "flash_attention_v1.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    flops = 4 * 4 * 32 * 4096 * 4096 * 128 * (0.5 if causal else 1.0)
    ours = triton.testing.do_bench(lambda: module.flash_attention(q, k, v, out, causal))
    sdpa = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=2e-2, rtol=2e-2)
    print(
        f"\ncausal={causal}: solution {ours:.3f} ms {flops / ours / 1e9:.0f} TFLOP/s; SDPA {sdpa:.3f} ms "
        f"{flops / sdpa / 1e9:.0f} TFLOP/s; solution / SDPA speed {sdpa / ours:.2f}"
    )


@pytest.mark.parametrize("exercise", ["flash_attention_v1", "tk_attention"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_float64_reference_runs_a_few_heads_at_a_time_and_gives_the_same_values(exercise, causal, monkeypatch):
    """float64 has only torch's math path, which holds every head's N x N scores at once (tens of GB at the timed
    sizes): the verdict's reference runs chunks of heads, to the same values; the "torch" figure's dtypes still call
    SDPA once."""
    from types import SimpleNamespace

    import torch
    import torch.nn.functional as F
    from interpreted import load_module

    reference = load_module(ROOT / "exercises" / exercise / "reference.py", f"{exercise}_reference_chunks")
    q, k, v = (torch.randn(2, 3, 20, 8, dtype=torch.float64) for _ in range(3))
    whole = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0].shape[0])
        return F.scaled_dot_product_attention(*args, **kwargs)

    monkeypatch.setattr(reference, "F", SimpleNamespace(scaled_dot_product_attention=counted))
    monkeypatch.setattr(reference, "SCORES_PER_CHUNK", 4 * 20 * 20)  # four heads a chunk
    assert torch.equal(reference.reference(q, k, v, causal=causal), whole)
    assert calls == [4, 2]
    calls.clear()
    half = reference.reference(q.half(), k.half(), v.half(), causal=causal)
    assert calls == [2] and half.shape == q.shape  # one call over the whole batch


def test_naive_attentions_float64_reference_runs_a_few_heads_at_a_time_to_the_same_values(monkeypatch):
    import math

    import torch
    from interpreted import load_module

    reference = load_module(ROOT / "exercises" / "naive_attention" / "reference.py", "naive_attention_reference_chunks")
    q, k, v = (torch.randn(2, 3, 20, 8, dtype=torch.float64) for _ in range(3))
    whole = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1) @ v
    monkeypatch.setattr(reference, "SCORES_PER_CHUNK", 4 * 20 * 20)  # four heads a chunk: two chunks
    assert torch.allclose(reference.reference(q, k, v), whole, rtol=1e-14, atol=1e-15)
    assert torch.allclose(reference.reference(q.float(), k.float(), v.float()), whole.float(), rtol=1e-5, atol=1e-6)
