"""`kcourse validate`: prove every solution passes and every stub does not (the instructor's CI check)."""

from __future__ import annotations

from grader.console import table
from grader.discovery import all_targets
from grader.grade import grade


def expected(source: str, status: str) -> str:
    """ok / unexpected / skipped for one exercise's status under `source`."""
    if status == "skipped":
        return "skipped"
    if source == "solutions":
        return "ok" if status == "passed" else "unexpected"
    return "ok" if status in ("failed", "error") else "unexpected"


def validate(source: str = "solutions", only: set[str] | None = None, lang: str | None = None,
             seed: int | None = None) -> dict:
    rows = []
    for target in all_targets():
        if (only and target.spec.id not in only) or (lang and target.variant.lang != lang):
            continue
        result = grade(target, source=source, seed=seed, record=False)
        rows.append({"exercise": target.spec.id, "lang": target.variant.lang, "status": result.status,
                     "outcome": expected(source, result.status), "verdict": result.verdict.splitlines()[0][:110]})
    return {"source": source, "rows": rows}


def format_summary(summary: dict) -> str:
    want = "pass" if summary["source"] == "solutions" else "fail"
    rows = [[r["exercise"], r["lang"], r["status"], r["outcome"], r["verdict"]] for r in summary["rows"]]
    counts = {k: sum(r["outcome"] == k for r in summary["rows"]) for k in ("ok", "unexpected", "skipped")}
    return (f"validate --source {summary['source']} (each must {want}):\n"
            + table(rows, ["exercise", "lang", "status", "outcome", "verdict"])
            + f"\n{counts['ok']} ok, {counts['unexpected']} unexpected, {counts['skipped']} skipped")
