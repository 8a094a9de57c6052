"""The figures of an evaluation's results files, shared by the runner and the judge's command: a file's summary
(`score_summary`, computed by `eval.score` itself so the two always agree), its refresh in `<name>.summary.json`
and the folder's reports after new verdicts (`refresh_summary`), and the exit codes that say a run's figures
are not yet results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eval.report import write_reports
from eval.score import score_file
from eval.verdicts import JudgeKeys, needs_verdict
from searchrl.jsonl import read_jsonl

EXIT_SEARCH_ERRORS = 3
EXIT_UNJUDGED = 4

SCORE_KEYS = ("n", "em", "cem", "f1", "acc_l", "no_answer", "judge_model", "judge_missing", "judge_requested")


def score_summary(path: Path, judge_model: str | None = None) -> dict[str, Any]:
    """The figures of one results file. ACC_L only when every record has a verdict of one judge model."""
    records = list(read_jsonl(path))
    keys = JudgeKeys()
    if judge_model is None:
        models = {r.get(keys.model) for r in records}
        if len(models) == 1 and None not in models and all(r.get(keys.verdict) is not None for r in records):
            judge_model = models.pop()
    missing = sum(needs_verdict(r, keys, judge_model) for r in records) if judge_model else 0
    judged = judge_model is not None and missing == 0
    scores = score_file(str(path), pred_key="pred_ans", answer_key="answer", judge_key="judge" if judged else None)
    n = len(records)
    summary = {
        **scores,
        "mean_searches": sum(r["num_searches"] for r in records) / n,
        "no_answer": sum(not r["has_answer"] for r in records),
        "search_errors": sum(r["search_errors"] for r in records),
        "questions_with_search_errors": sum(bool(r["search_errors"]) for r in records),
        "judge_model": judge_model if judged else None,
    }
    if judge_model and missing:
        summary.update(judge_missing=missing, judge_requested=judge_model)
    return summary


def refresh_summary(path: Path, judge_model: str | None = None) -> bool:
    """Recompute the figures of `<name>.summary.json` beside a results file, and the folder's reports."""
    summary_path = path.with_name(f"{path.stem}.summary.json")
    if not summary_path.is_file():
        return False
    summary = {k: v for k, v in json.loads(summary_path.read_text()).items() if k not in SCORE_KEYS}
    summary.update(score_summary(path, judge_model))
    summary_path.write_text(json.dumps(summary, indent=2))
    write_reports(path.parent)
    return True
