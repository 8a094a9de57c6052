"""Filling in LLM-judge verdicts (ACC_L) in a results file, for the records that have none yet.

Generation and judging are separate passes: every finished generation is on disk before the judge is
asked, so a judge outage loses nothing, and a later pass (the same run again with `--judge-url`, or
`python -m eval.judge FILE.jsonl`) judges what is left. The first failure that outlasts the judge
client's retries stops the pass, rather than waiting out the retries of every remaining record.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from eval.score import read_answer
from searchrl.jsonl import field, read_jsonl
from searchrl.metrics import as_golds


class Judge(Protocol):
    model: str

    async def judge(self, question: str, golds: list[str], prediction: str) -> bool: ...


@dataclass(frozen=True)
class JudgeKeys:
    question: str = "question"
    answer: str = "answer"
    pred: str | None = "pred_ans"  # None: parse the answer from the trajectory
    trajectory: str = "gen_text_store"
    verdict: str = "judge"

    @property
    def model(self) -> str:
        return f"{self.verdict}_model"


@dataclass(frozen=True)
class JudgePass:
    judged_now: int
    missing: int  # records still without a verdict of this judge model
    error: str | None = None


def needs_verdict(record: dict[str, Any], keys: JudgeKeys, model: str) -> bool:
    # A file from elsewhere names no judge model; its verdicts count as this judge's.
    return record.get(keys.verdict) is None or record.get(keys.model, model) != model


def prediction(record: dict[str, Any], keys: JudgeKeys, where: str) -> str:
    if keys.pred is None:
        return read_answer(record, keys.trajectory, where)[0] or ""
    value = field(record, keys.pred, where)
    return "" if value is None else str(value)


def write_jsonl_atomic(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


async def fill_verdicts(
    path: Path, judge: Judge, keys: JudgeKeys = JudgeKeys(), out: Path | None = None, chunk: int = 64
) -> JudgePass:
    """Judge every record of `path` without a verdict of `judge.model`; write them to `out` (default:
    `path` itself, replaced atomically after every chunk)."""
    records = list(read_jsonl(path))
    todo = [i for i, r in enumerate(records) if needs_verdict(r, keys, judge.model)]
    target = out or path
    judged = 0
    error = None
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        asks = []
        for i in part:
            where = f"{path}:{i + 1}"
            r = records[i]
            golds = as_golds(field(r, keys.answer, where))
            asks.append(judge.judge(str(field(r, keys.question, where)), golds, prediction(r, keys, where)))
        verdicts = await asyncio.gather(*asks, return_exceptions=True)
        for i, v in zip(part, verdicts, strict=True):
            if isinstance(v, BaseException):
                error = error or f"{type(v).__name__}: {v}"
                continue
            records[i][keys.verdict] = str(bool(v))
            records[i][keys.model] = judge.model
            judged += 1
        write_jsonl_atomic(target, records)
        if error:
            break
    if not todo and out is not None:
        write_jsonl_atomic(target, records)
    missing = sum(needs_verdict(r, keys, judge.model) for r in records)
    return JudgePass(judged, missing, error)
