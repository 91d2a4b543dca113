"""`kcourse report portfolio` (grader/reports/portfolio.py): every result of the learner's in one document with its
plots; what is missing is said with the command that records it; its notes and the other reports' notes are
kept; its notes sections finish days 99-100 of the 100-day plan (`requires = ["portfolio:projects"]`, ...)."""

import pytest
from click.testing import CliRunner
from test_reports import GPU, _red_pixels, env_record, grade_record

from grader.cli import main
from grader.core import store
from grader.core.plans import PORTFOLIO_SECTIONS, PlanError, Requirement, load_plans
from grader.reports import portfolio, reporting

PNG = b"\x89PNG\r\n\x1a\n"


def comparison_record():
    rows = [
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
    ]
    return {
        "kind": "compare",
        "exercise": "reduction",
        "lang": "cuda",
        "seed": 3,
        "device": GPU["name"],
        "case": "n=268435456",
        "unit": "GB/s",
        "rows": rows,
    }


def capstone_record(status="passed", source="learner", kernels_rate=41000.0):
    def run(losses, rate):
        return {
            "name": "x",
            "losses": losses,
            "tokens_per_s": rate,
            "peak_bytes": 2.5e9,
            "seconds": 30.0,
            "parameters": 3.2e6,
        }

    config = {
        "layers": 4,
        "heads": 4,
        "d_model": 256,
        "context": 256,
        "batch": 128,
        "steps": 6,
        "final_window": 2,
        "low_precision": "bfloat16",
        "compile": True,
    }
    return {
        "kind": "capstone",
        "at": 1.0,
        "source": source,
        "seed": 7,
        "tiny": False,
        "data": "(embedded default text)",
        "device": {"name": GPU["name"]},
        "config": config,
        "status": status,
        "verdict": "run, loss, speed passed",
        "choices": [
            {"operation": "gelu", "role": "forward", "exercise": "activations", "lang": "gelu_tanh", "reason": ""},
            {"operation": "adamw", "role": "step", "exercise": "", "lang": "", "reason": "not graded yet"},
        ],
        "runs": {
            "eager": run([4.0, 3.5, 3.0, 2.6, 2.4, 2.3], 40000.0),
            "compile": run([4.0, 3.5, 3.0, 2.6, 2.35, 2.31], 52000.0),
            "kernels": run([4.0, 3.5, 3.0, 2.6, 2.41, 2.3], kernels_rate),
        },
        "checks": [{"name": "loss", "status": "passed", "message": "final loss 2.3550 vs eager's 2.3500"}],
    }


def block_record():
    figures = {"error": 1.2e-3, "worst": "x", "torch_error": 1.0e-3, "torch_worst": "x"}
    return {
        "kind": "block",
        "source": "learner",
        "seed": 5,
        "tiny": False,
        "device": {"name": GPU["name"]},
        "config": {"batch": 8, "context": 256, "d_model": 256, "heads": 4, "low_precision": "bfloat16"},
        "result": {"parts": {"ffn": figures}, "ms": 1.25, "torch_ms": 1.5},
        "whose": {"ffn": ["gelu forward: yours (activations, gelu_tanh)", "linear forward: PyTorch"]},
        "checks": [{"name": "ffn", "status": "passed", "message": "ffn: within the limit"}],
        "status": "passed",
        "verdict": "ffn passed",
    }


@pytest.fixture
def recorded(isolated_state):
    store.append(env_record())
    store.append(grade_record("reduction", "cuda", "GB/s", ["n=1048576", "n=268435456"], 0.5))
    store.append(grade_record("matmul", "cuda", "TFLOP/s", ["M=1024 N=1024 K=1024", "M=4096 N=4096 K=4096"], 3.0))
    failed = grade_record("softmax", "triton", "GB/s", [], 0.1)
    store.append({**failed, "status": "failed", "verdict": "size 1000: 17 outputs differ — is the row max subtracted?"})
    store.append(comparison_record())
    store.append(capstone_record())
    store.append(block_record())
    store.append(
        {
            "kind": "tune",
            "exercise": "matmul",
            "lang": "cuda",
            "device": GPU["name"],
            "case": "M=4096",
            "unit": "TFLOP/s",
            "speedup": 1.8,
            "best": {"config": "BLOCK=128", "ms": 3.0},
            "rows": [
                {
                    "config": f"BLOCK={b}",
                    "ms": 3.0 * 128 / b,
                    "rate": b / 4,
                    "roofline_pct": b / 4,
                    "correct": True,
                    "error": "",
                }
                for b in (64, 128)
            ],
        }
    )
    store.append(
        {
            "kind": "profile",
            "exercise": "reduction",
            "lang": "cuda",
            "device": GPU["name"],
            "case": "n=1048576",
            "calls": 5,
            "trace": "/tmp/trace.json",
            "ncu": [],
            "top": [{"name": "reduce_kernel", "calls": 5, "device_us": 125.0, "cpu_us": 20.0}],
        }
    )
    return isolated_state / "reports"


def test_the_portfolio_has_every_section_with_the_figures(recorded):
    text = portfolio.render().read_text()
    assert "GPU: NVIDIA H100 80GB HBM3 (measured copy bandwidth 3002 GB/s" in text
    # the best passing grade of each exercise at its largest timed size: rate, % of roofline, vs solution, GPU
    assert "| reduction (cuda) | n=268435456 | 1 | 200 GB/s | 43% | 0.80× | NVIDIA H100 80GB HBM3 |" in text
    assert "| matmul (cuda) | M=4096 N=4096 K=4096 | 6 | 200 TFLOP/s | 43% | 0.80× | NVIDIA H100 80GB HBM3 |" in text
    assert "- 2 exercise versions passed (2 cuda)." in text
    assert (
        "- softmax (triton): failed — size 1000: 17 outputs differ" in text
        and "`kcourse grade softmax --lang triton`" in text
    )
    assert "![Roofline](roofline.png)" in text and "(speed_reduction_cuda.png)" in text
    # the comparison's table and bar chart
    assert (
        "### reduction (cuda): 2 versions, timed at n=268435456" in text
        and "| shuffle.cu | passed | 0.4 | 2684 |" in text
    )
    assert "![reduction (cuda): versions compared](compare_reduction_cuda.png)" in text
    # the block and the capstone: their tables, tokens/s and the loss curves
    assert "| ffn | 0.0012 (x) | 0.001 (x) | passed | yours: gelu forward; PyTorch: linear forward |" in text
    assert "yours 1.250 ms, PyTorch 1.500 ms" in text
    assert "| gelu | yours (activations, gelu_tanh) |" in text and "| adamw | PyTorch — not graded yet |" in text
    assert (
        "| your kernels | 2.3550 | 41,000 | 1.02x |" in text and "| torch.compile | 2.3300 | 52,000 | 1.30x |" in text
    )
    assert "![capstone loss curves](portfolio_capstone_loss.png)" in text and "Verdict: **passed**" in text
    # profiles and tunings, and the attention sweep's absence said with its command
    assert "| reduce_kernel | 5 | 125.0 | 20.0 |" in text and "Best: **BLOCK=128** at 3 ms, 1.80×" in text
    assert "No attention comparison recorded yet: run `kcourse compare attention`" in text
    for name in ("roofline.png", "speed_matmul_cuda.png", "compare_reduction_cuda.png", "portfolio_capstone_loss.png"):
        assert (recorded / name).read_bytes()[:8] == PNG, name
    assert _red_pixels(recorded / "portfolio_capstone_loss.png")[0] > 50  # your kernels' curve is drawn
    for section in PORTFOLIO_SECTIONS:
        assert f"<!-- notes:portfolio-{section} -->" in text
    assert "None" not in text and "Undefined" not in text


def test_with_no_records_the_portfolio_says_what_to_run(isolated_state):
    text = portfolio.render().read_text()
    for missing in (
        "No exercise passed yet: `kcourse grade <exercise>`",
        "No `kcourse compare` recorded yet: `kcourse compare",
        "No attention comparison recorded yet: run `kcourse compare attention`",
        "No `kcourse block` run of yours recorded yet",
        "No `kcourse capstone` run of yours recorded yet",
        "No profile recorded yet: `kcourse profile <exercise>`",
        "No tuning recorded yet: `kcourse tune <exercise>`",
        "No notes written in your other reports yet",
    ):
        assert missing in text, missing
    assert "Capstone: not yet." in text and "![" not in text


def test_the_portfolio_shows_the_learners_best_capstone_not_the_kits_or_a_later_failure(isolated_state):
    store.append(capstone_record(source="solutions", kernels_rate=99000.0))
    assert portfolio.capstone_view(isolated_state) is None  # the kit's run is not the learner's
    store.append(capstone_record(kernels_rate=41000.0))
    store.append({**capstone_record(kernels_rate=10.0), "status": "failed", "verdict": "NaN at step 3"})
    view = portfolio.capstone_view(isolated_state)
    assert view["status"] == "passed" and any(row[2] == "41,000" for row in view["runs"])


def test_a_capstone_or_block_record_it_cannot_read_is_said_not_raised(isolated_state):
    store.append({"kind": "capstone", "source": "learner", "status": "passed", "verdict": "ok", "runs": "junk"})
    store.append({"kind": "block", "source": "learner", "status": "failed", "result": {"parts": {"ffn": {}}}})
    text = portfolio.render().read_text()
    assert "Your `kcourse capstone` record (passed: ok) was written by another version of the kit" in text
    assert "Your `kcourse block` record (failed) was written by another version of the kit" in text


def test_the_portfolio_renders_from_old_partial_and_unknown_records(isolated_state):
    from test_reports_old_records import OLD_AND_ODD_RECORDS, cuda_grade_on_a_cpu_machine

    for record in [
        cuda_grade_on_a_cpu_machine(),
        *OLD_AND_ODD_RECORDS,
        {"kind": "compare", "exercise": "reduction"},
        {"kind": "compare_attention", "implementations": "junk"},
        {"kind": "capstone"},
        {"kind": "block", "checks": 3},
    ]:
        store.append(record)
    text = portfolio.render().read_text()
    assert "None" not in text and "Undefined" not in text
    assert "| matmul (cuda) | not timed | — | — | — | — | — |" in text  # an early kit's pass: status only
    assert "- reduction (cuda): skipped — passed: build; skipped: numerics (no GPU found)" in text
    assert "- gelu_op (unknown): failed — (no verdict recorded) (`kcourse grade gelu_op`)" in text
    assert "Your `kcourse capstone` record (unknown) was written by another version of the kit" in text


def _answer(path, section_id, words):
    text = path.read_text()
    start = text.index(f"<!-- notes:{section_id} -->\n") + len(f"<!-- notes:{section_id} -->\n")
    path.write_text(text[:start] + words + "\n" + text[text.index(f"<!-- /notes:{section_id} -->") :])


@pytest.mark.slow
def test_notes_survive_a_re_render_and_the_other_reports_notes_are_quoted(recorded):
    path = portfolio.render()
    _answer(path, "portfolio-hard", "Bank conflicts in the transpose: padding the tile fixed them.")
    day97 = reporting.render("day97", plan_id="challenge-100-day")
    _answer(day97, "day97-1", "Tiling, coalescing and online softmax.\n\n## My list\n- reduction at 89%")
    store.append(grade_record("transpose", "cuda", "GB/s", ["n=4096"], 0.2))
    text = portfolio.render().read_text()
    assert "Bank conflicts in the transpose: padding the tile fixed them." in text and "transpose (cuda)" in text
    quoted = text.split("## Your notes from the other reports")[1]
    assert "### challenge-100-day_day97_report.md" in quoted
    assert "**What you learned in 100 days, and your main achievements with their figures.**" in quoted
    assert "> Tiling, coalescing and online softmax.\n>\n> ## My list\n> - reduction at 89%" in quoted
    assert "<!-- notes:day97" not in text  # quoted, not a section of the portfolio's own (it follows day97's file)
    assert "this part is yours" not in quoted.split("## Your projects")[0]


@pytest.mark.slow
def test_kcourse_report_portfolio_writes_the_file_and_takes_out(recorded, tmp_path):
    result = CliRunner().invoke(main, ["report", "portfolio"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {recorded / 'portfolio.md'}" and "→ plan" not in result.output
    elsewhere = tmp_path / "share"
    result = CliRunner().invoke(main, ["report", "portfolio", "--out", str(elsewhere)])
    assert result.exit_code == 0 and (elsewhere / "portfolio.md").exists() and (elsewhere / "roofline.png").exists()
    assert "Did you mean 'portfolio'" in CliRunner().invoke(main, ["report", "portfolo"]).output


# --- What it finishes in a plan -------------------------------------------------------------------------------


def test_a_portfolio_requirement_names_every_section_or_one():
    assert Requirement.parse("portfolio") == Requirement("portfolio")
    assert Requirement.parse("portfolio:projects") == Requirement("portfolio", section="projects")
    for bad in ("portfolio:project", "portfolio:", "portfolio:projects:x"):
        with pytest.raises(PlanError, match="portfolio:SECTION, SECTION one of learned, hard, projects, sharing"):
            Requirement.parse(bad)
    assert set(portfolio.SECTIONS) == set(PORTFOLIO_SECTIONS)  # each section has its question


def test_days_97_to_100_are_the_retrospective_reports_then_the_portfolios_notes():
    days = {u.key: u for u in load_plans()["challenge-100-day"].units}
    assert [days[f"day{d}"].requires for d in (97, 98, 99, 100)] == [
        ["report"],
        ["report"],
        ["portfolio:projects"],
        ["portfolio"],
    ]
    assert not any(days[f"day{d}"].planned for d in (97, 98, 99, 100))
    for day in ("day97", "day99", "day100"):
        assert "kcourse report portfolio" in days[day].deliverable, day


def _progress(key):
    result = CliRunner().invoke(main, ["progress", "--plan", "challenge-100-day"])
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if f"  {key} " in line)


def test_days_99_and_100_are_done_when_the_portfolios_notes_are_written(isolated_state):
    assert "your portfolio's 'projects' notes: not written (`kcourse report portfolio`, then answer" in _progress(
        "day99"
    )
    path = portfolio.render()
    assert _progress("day99").startswith("[ ]") and "0 of 4 notes written" in _progress("day100")
    _answer(path, "portfolio-projects", "The reduction ladder, flash attention v2 and the capstone.")
    assert _progress("day99").startswith("[x]") and "'projects' notes: 1 of 1 notes written" in _progress("day99")
    assert _progress("day100").startswith("[~]") and "1 of 4 notes written" in _progress("day100")
    for section in ("learned", "hard", "sharing"):
        _answer(path, f"portfolio-{section}", "Written.")
    portfolio.render()  # re-rendering keeps them
    assert _progress("day100").startswith("[x]") and "your notes in the portfolio: 4 of 4 notes written" in _progress(
        "day100"
    )
