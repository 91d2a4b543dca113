"""The class leaderboard: per exercise and GPU model, the passing submissions ranked by speed relative
to the solution (the gradebook's `ratio`), each learner shown by the pseudonym they chose (the first line
of a file `pseudonym` or `pseudonym.txt` in their folder) or else a stable anonymous id. Written as
leaderboard.md and leaderboard.html beside the gradebook; a rendering of its rows, nothing recomputed.
Speeds measured on different GPU models are never ranked together."""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter, defaultdict
from pathlib import Path

import jinja2

PSEUDONYM_FILES = ("pseudonym", "pseudonym.txt")
PSEUDONYM_MAX = 32
SALT_FILE = ".leaderboard-salt"


def class_salt(out_dir: Path) -> str:
    """A secret of this gradebook, so anonymous ids are stable across runs but cannot be recomputed from
    the class list by anyone who sees the leaderboard."""
    path = out_dir / SALT_FILE
    if not path.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


def anonymous_id(learner: str, salt: str) -> str:
    return "anon-" + hashlib.sha256(f"{salt}:{learner}".encode()).hexdigest()[:8]


def chosen_pseudonym(learner_dir: Path) -> str | None:
    for name in PSEUDONYM_FILES:
        path = learner_dir / name
        if path.is_file():
            lines = path.read_text(errors="replace").splitlines()
            text = "".join(c for c in (lines[0] if lines else "") if c.isprintable()).strip()[:PSEUDONYM_MAX]
            if text:
                return text
    return None


def pseudonyms(submissions: Path, learners: list[str], salt: str) -> dict[str, str]:
    """learner folder -> name shown. A pseudonym several learners chose gets each one's id beside it."""
    chosen = {learner: chosen_pseudonym(submissions / learner) for learner in learners}
    taken = Counter(name for name in chosen.values() if name)
    return {
        learner: (
            name
            if name and taken[name] == 1
            else f"{name} ({anonymous_id(learner, salt)})"
            if name
            else anonymous_id(learner, salt)
        )
        for learner, name in chosen.items()
    }


def boards(rows: list[dict], names: dict[str, str]) -> list[dict]:
    """One board per (exercise, lang, GPU model): passing, timed rows, fastest relative to the solution first."""
    grouped: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        if row.get("status") == "passed" and row.get("ratio") is not None:
            grouped[row["exercise"], row["lang"], row.get("gpu") or "unknown GPU"].append(row)
    result = []
    for (exercise, lang, gpu), entries in sorted(grouped.items()):
        entries.sort(key=lambda r: (-r["ratio"], names.get(r["learner"], r["learner"])))
        result.append(
            {
                "exercise": exercise,
                "lang": lang,
                "gpu": gpu,
                "entries": [
                    {
                        "rank": rank,
                        "name": names.get(r["learner"], r["learner"]),
                        "ratio": round(r["ratio"], 3),
                        "learner_ms": r.get("learner_ms"),
                        "bar": r.get("bar") or "",
                    }
                    for rank, r in enumerate(entries, 1)
                ],
            }
        )
    return result


def markdown(tables: list[dict]) -> str:
    lines = [
        "# Class leaderboard",
        "",
        "Passing submissions, fastest first: speed relative to the instructor's solution on the same GPU model "
        "(1.00 = as fast). Names are pseudonyms.",
        "",
    ]
    if not tables:
        lines.append("No timed passing submission yet (speed is measured on a GPU only).")
    for table in tables:
        lines += [
            f"## {table['exercise']} ({table['lang']}) on {_md(table['gpu'])}",
            "",
            "| rank | learner | × solution | ms | speed bar |",
            "|---:|---|---:|---:|---|",
        ]
        lines += [
            f"| {e['rank']} | {_md(e['name'])} | {e['ratio']:.2f} | {_ms(e['learner_ms'])} | {_md(e['bar'])} |"
            for e in table["entries"]
        ]
        lines.append("")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _ms(value) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "—"


HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>Class leaderboard</title>
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse;margin-bottom:2em}
td,th{padding:.3em .8em;border-bottom:1px solid #ddd}td.n{text-align:right}</style></head><body>
<h1>Class leaderboard</h1>
<p>Passing submissions, fastest first: speed relative to the instructor's solution on the same GPU model
(1.00 = as fast). Names are pseudonyms.</p>
{% for t in tables %}<h2>{{ t.exercise }} ({{ t.lang }}) on {{ t.gpu }}</h2>
<table><tr><th>rank</th><th>learner</th><th>× solution</th><th>ms</th><th>speed bar</th></tr>
{% for e in t.entries %}<tr><td class="n">{{ e.rank }}</td><td>{{ e.name }}</td><td class="n">{{ "%.2f"|format(e.ratio) }}</td>
<td class="n">{{ "%.4g"|format(e.learner_ms) if e.learner_ms is number else "—" }}</td><td>{{ e.bar }}</td></tr>
{% endfor %}</table>
{% else %}<p>No timed passing submission yet (speed is measured on a GPU only).</p>
{% endfor %}</body></html>
"""


def html(tables: list[dict]) -> str:
    return jinja2.Environment(autoescape=True).from_string(HTML).render(tables=tables)  # names are learners' text


def write(rows: list[dict], submissions: Path, out_dir: Path) -> tuple[Path, Path]:
    """leaderboard.md and leaderboard.html in out_dir, from the gradebook's rows."""
    names = pseudonyms(submissions, sorted({r["learner"] for r in rows}), class_salt(out_dir))
    tables = boards(rows, names)
    md_path, html_path = out_dir / "leaderboard.md", out_dir / "leaderboard.html"
    md_path.write_text(markdown(tables))
    html_path.write_text(html(tables))
    return md_path, html_path


def gradescope_entries(results) -> list[dict]:
    """Gradescope's per-submission `leaderboard` field: each passing exercise's speed × the solution
    (higher is better); Gradescope ranks the class and shows the names learners pick there."""
    entries = []
    for result in results:
        timing = result.timings[-1] if result.timings else None
        if result.status == "passed" and timing is not None and timing.ratio is not None:
            entries.append(
                {
                    "name": f"{result.exercise} ({result.lang}) × solution speed",
                    "value": round(timing.ratio, 3),
                    "order": "desc",
                }
            )
    return entries
