"""Evaluation questions: the four sets of the R1-Searcher paper (bundled), a Hugging Face dataset, or a JSONL.

The bundled files are the exact 500-question samples (and all of Bamboogle) that R1-Searcher
reports on; the full dev sets on the hub would give numbers that are not comparable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.records import RecordError, read_jsonl

DATA = Path(__file__).resolve().parent / "data"
BUNDLED = {"hotpotqa": "hotpotqa_500", "2wiki": "2wiki_500", "musique": "musique_500", "bamboogle": "bamboogle"}


def dataset_name(spec: str) -> str:
    if spec in BUNDLED:
        return spec
    if spec.startswith("hf:"):
        return spec[3:].replace("/", "__").split(":")[0]
    return Path(spec).stem


def load_questions(spec: str, question_key: str = "question", answer_key: str = "answer") -> list[dict[str, Any]]:
    """`hotpotqa|2wiki|musique|bamboogle` (bundled), `hf:NAME[:SPLIT]`, or a path to a JSONL file.

    Each record gets `idx` (its own, or its position) plus `question` and `answer`."""
    if spec in BUNDLED:
        rows: list[dict[str, Any]] = list(read_jsonl(DATA / f"{BUNDLED[spec]}.jsonl"))
    elif spec.startswith("hf:"):
        from datasets import load_dataset

        name, _, split = spec[3:].partition(":")
        rows = [dict(r) for r in load_dataset(name, split=split or "validation")]
    elif Path(spec).is_file():
        rows = list(read_jsonl(spec))
    else:
        raise RecordError(f"--dataset {spec!r}: not one of {sorted(BUNDLED)}, not hf:NAME, and no such file")
    out = []
    for i, row in enumerate(rows):
        if question_key not in row or answer_key not in row:
            raise RecordError(f"{spec}: record {i + 1} needs {question_key!r} and {answer_key!r}, has {sorted(row)}")
        out.append({"idx": row.get("idx", i), "question": row[question_key], "answer": row[answer_key]})
    return out
