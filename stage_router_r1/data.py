"""The routing stage's data: a question, its gold answer, the candidate models with price and latency, and
optionally the cheapest model that answers it correctly (`optimal_model`).

This record shape is this project's, not Router-R1's: nothing in Router-R1 has `query_type`,
`candidate_models` or `optimal_model`; its data is verl parquet (stage_router_r1/original.py reads it and
draws its sets). Records in this shape are validated (errors name the line and the field); question/answer
sets (the bundled ones, a file, a Hugging Face dataset, a Router-R1 parquet file) are mixed into it, their
candidates being the stage's pool. Every record becomes one line of OpenRLHF's prompt dataset (`prompt`, `label`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from searchrl.jsonl import RecordError
from searchrl.metrics import as_golds
from searchrl.paths import EXAMPLES
from searchrl.qa_data.eval_sets import EVAL_SETS
from searchrl.qa_data.questions import dataset_name, load_questions
from searchrl.routing.llm_router import RouterConfig
from stage_router_r1.original import is_verl_parquet, read_verl_parquet

# Question sets that ship with the project, by name: R1-Searcher's stage-1 training questions (HotpotQA
# and 2Wiki) and the four evaluation sets (for test splits: training on them leaks into evaluation).
SOURCES = {"stage1": EXAMPLES / "stage_1.jsonl", **{name: None for name in EVAL_SETS}}


class Candidate(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    cost: float = Field(ge=0)
    latency: float = Field(ge=0)


class RouterRecord(BaseModel):
    """One routing record (this project's shape); unknown extra keys are kept as they are."""

    model_config = ConfigDict(extra="allow")

    query: str = Field(min_length=1)
    query_type: str = ""
    candidate_models: list[Candidate] = Field(min_length=1)
    ground_truth: str | list[str]
    optimal_model: str | None = None

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the question is blank")
        return value.strip()

    @field_validator("ground_truth")
    @classmethod
    def _some_gold(cls, value: str | list[str]) -> str | list[str]:
        if not as_golds(value) or not all(str(g).strip() for g in as_golds(value)):
            raise ValueError("give the gold answer as a non-empty string or list of non-empty strings")
        return value

    @model_validator(mode="after")
    def _optimal_is_a_candidate(self) -> RouterRecord:
        names = [c.name for c in self.candidate_models]
        if self.optimal_model is not None and self.optimal_model not in names:
            raise ValueError(f"optimal_model {self.optimal_model!r} is not among candidate_models {names}")
        return self


def _field_errors(where: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(record)"
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {field}: {msg}")
    return "\n".join(lines)


def _raw_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) from a JSON list or JSON lines; `where` names the file and line (or list item)."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}: not valid JSON: {e}") from None
        for i, row in enumerate(data, start=1):
            yield f"{path}: item {i}", row
        return
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{i}", json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}:{i}: not valid JSON: {e.msg} at column {e.colno}") from None


def is_router_file(path: Path) -> bool:
    """Whether a file holds routing records (its first record has `query`)."""
    if path.suffix == ".parquet":
        return False
    for _, row in _raw_records(path):
        return isinstance(row, dict) and "query" in row
    return False


def read_router_records(path: str | Path, pool: RouterConfig | None = None) -> list[RouterRecord]:
    """Every record validated; all problems reported together, each naming its line and field. With a
    pool, every candidate must be one of its models (the policy can route only there)."""
    path = Path(path)
    names = [m.name for m in pool.models] if pool is not None else None
    records, problems = [], []
    for where, row in _raw_records(path):
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a JSON object, got {type(row).__name__}")
            continue
        try:
            record = RouterRecord.model_validate(row)
        except ValidationError as e:
            problems.append(_field_errors(where, e))
            continue
        if names is not None:
            for j, c in enumerate(record.candidate_models):
                if c.name not in names:
                    problems.append(
                        f"{where}: candidate_models.{j}.name: {c.name!r} is not in the stage's pool {names} "
                        "(add it under search.router.models, or drop it from the record)"
                    )
        records.append(record)
        if len(problems) >= 20:
            break
    if problems:
        raise RecordError("\n".join(problems))
    if not records:
        raise RecordError(f"{path}: no records")
    return records


def pool_candidates(pool: RouterConfig) -> list[Candidate]:
    """The stage's pool as Router-R1's candidates: cost = price per 1k prompt + completion tokens."""
    return [
        Candidate(
            name=m.name,
            cost=m.price_per_1k_prompt + m.price_per_1k_completion,
            latency=m.latency_s if m.latency_s is not None else 0.0,
        )
        for m in pool.models
    ]


def parse_mix(items: list[str]) -> list[tuple[str, int | None]]:
    """`SOURCE=N` items (N a count or `all`); SOURCE is a bundled name, a file, or hf:NAME[:CONFIG][:SPLIT]."""
    out = []
    for item in items:
        source, sep, count = item.rpartition("=")
        if not sep or not source:
            raise RecordError(f"--mix {item!r}: expected SOURCE=N, e.g. stage1=200 or hf:nq_open:train=200")
        if count != "all" and not (count.isdigit() and int(count) > 0):
            raise RecordError(f"--mix {item!r}: N must be a positive count or `all`")
        out.append((source, None if count == "all" else int(count)))
    return out


def load_source(source: str, pool: RouterConfig) -> list[RouterRecord]:
    """A mix source as Router-R1 records, `query_type` its name, candidates the pool."""
    path = SOURCES.get(source)
    spec = str(path) if path is not None else source
    candidates = pool_candidates(pool)
    if source not in SOURCES and Path(source).is_file() and is_verl_parquet(Path(source)):
        return [
            RouterRecord(
                query=r["question"], query_type=r["query_type"], candidate_models=candidates, ground_truth=r["answer"]
            )
            for r in read_verl_parquet(source)
        ]
    if source not in SOURCES and Path(source).is_file() and is_router_file(Path(source)):
        return read_router_records(source, pool)
    name = source if source in SOURCES else dataset_name(source)
    return [
        RouterRecord(query=r["question"], query_type=name, candidate_models=candidates, ground_truth=r["answer"])
        for r in load_questions(spec)
        if str(r["question"]).strip()
    ]


def draw(records: list[RouterRecord], count: int | None, rng: random.Random) -> list[RouterRecord]:
    if count is None or count >= len(records):
        return list(records)
    return rng.sample(records, count)
