"""Results rendered for other tools: JUnit XML (CI systems), Gradescope's results.json, and GitHub
Actions annotations. Each is a rendering of recorded GradeResults; nothing is recomputed."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

from grader.core.records import ERROR, FAILED, PASSED, SKIPPED, GradeResult


def junit_xml(results: list[GradeResult]) -> str:
    """One <testcase> per exercise × check; failed -> <failure>, error -> <error>, skipped -> <skipped>."""
    suite = ET.Element("testsuite", name="kcourse", tests="0", failures="0", errors="0", skipped="0")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for result in results:
        total_time += result.duration_s
        for check in result.checks:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{result.exercise}.{result.lang}",
                name=check.name,
                time=f"{result.duration_s / max(1, len(result.checks)):.3f}",
            )
            counts["tests"] += 1
            tag = {FAILED: "failure", ERROR: "error", SKIPPED: "skipped"}.get(check.status)
            if tag:
                counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[tag]] += 1
                node = ET.SubElement(case, tag, message=check.message.splitlines()[0][:500])
                node.text = check.message
            if result.output and check.status in (FAILED, ERROR):
                ET.SubElement(case, "system-out").text = result.output
    suite.attrib.update({k: str(v) for k, v in counts.items()}, time=f"{total_time:.3f}")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def _points(result: GradeResult) -> list[tuple[str, float, float, str]]:
    """(test name, score, max score, output) per scored part of one exercise."""
    checks = {c.name: c for c in result.checks}
    bad = [c for c in result.checks if c.status in (FAILED, ERROR)]
    rows = []
    for part, max_score in (result.scoring or {"numerics": 1.0}).items():
        check = checks.get(part)
        earned = check is not None and check.status == PASSED
        if part == "numerics":  # a correct result counts only if it was honestly computed
            earned = earned and checks.get("integrity") is not None and checks["integrity"].status == PASSED
        if check is None and bad:
            output = f"not reached: {bad[0].message}"
        elif check is None:
            output = "not run"
        else:
            output = f"{check.status}: {check.message}"
            if not earned and part == "numerics" and bad:
                output = f"{bad[0].status}: {bad[0].message}"
        rows.append((f"{result.exercise} ({result.lang}): {part}", max_score if earned else 0.0, max_score, output))
    return rows


def gradescope_json(results: list[GradeResult]) -> dict:
    from grader.reports.leaderboard import gradescope_entries

    tests = [
        {"name": name, "score": score, "max_score": max_score, "output": output, "visibility": "visible"}
        for result in results
        for name, score, max_score, output in _points(result)
    ]
    data = {
        "score": sum(t["score"] for t in tests),
        "max_score": sum(t["max_score"] for t in tests),
        "execution_time": round(sum(r.duration_s for r in results), 2),
        "tests": tests,
    }
    leaderboard = gradescope_entries(results)  # only where a passing kernel was timed (on a GPU)
    if leaderboard:
        data["leaderboard"] = leaderboard
    return data


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_annotations(results: list[GradeResult]) -> list[str]:
    """`::error file=...::message` lines; GitHub Actions shows them on the files in the pull request."""
    lines = []
    for result in results:
        for check in result.checks:
            if check.status not in (FAILED, ERROR):
                continue
            location = f"file={result.file}," if result.file else ""
            title = f"{result.exercise} ({result.lang}) {check.name}"
            lines.append(f"::error {location}title={_escape(title)}::{_escape(check.message)}")
    return lines


def write_outputs(results: list[GradeResult], junit: Path | None, gradescope: Path | None) -> list[str]:
    """Write the requested files; return annotation lines when running under GitHub Actions."""
    if junit:
        Path(junit).write_text(junit_xml(results))
    if gradescope:
        Path(gradescope).write_text(json.dumps(gradescope_json(results), indent=2))
    return github_annotations(results) if os.environ.get("GITHUB_ACTIONS") == "true" else []
