"""Evaluation questions: the four sets of the R1-Searcher paper (bundled), a Hugging Face dataset, or a file.

The bundled files are the exact 500-question samples (and all of Bamboogle) that R1-Searcher
reports on; the full dev sets on the hub would give numbers that are not comparable. Files and hub
datasets in other projects' formats are read too: R1-Searcher's (`question`, `answer`), Search-R1's
and FlashRAG's (`id`, `question`, `golden_answers`), or any other with the fields named.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from searchrl.hub import load_dataset_rows
from searchrl.jsonl import RecordError, read_jsonl
from searchrl.qa_data.eval_sets import EVAL_SETS, eval_set_path

# Answer fields tried in order when none is named: R1-Searcher, FlashRAG / Search-R1, SQuAD-like sets.
ANSWER_FIELDS = ("answer", "golden_answers", "answers")
ID_FIELDS = ("idx", "id")
SPLITS = ("train", "validation", "test", "dev")
NAME = re.compile(r"[A-Za-z0-9_.-]+")


def parse_hf(spec: str) -> tuple[str, str | None, str | None]:
    """`hf:NAME[:CONFIG][:SPLIT]`; a lone second part is the split when it is train/validation/test/dev."""
    parts = spec[3:].split(":")
    if not parts[0] or len(parts) > 3 or not all(parts):
        raise RecordError(f"--dataset {spec!r}: expected hf:NAME[:CONFIG][:SPLIT]")
    if len(parts) == 1:
        return parts[0], None, None
    if len(parts) == 2:
        return (parts[0], None, parts[1]) if parts[1] in SPLITS else (parts[0], parts[1], None)
    return parts[0], parts[1], parts[2]


def named(spec: str) -> tuple[str | None, str]:
    """`NAME=SPEC` names a dataset's output files (`nq=hf:RUC-NLPIR/FlashRAG_datasets:nq:test`)."""
    name, sep, rest = spec.partition("=")
    if sep and NAME.fullmatch(name) and not Path(spec).exists():
        return name, rest
    return None, spec


def dataset_name(spec: str) -> str:
    name, spec = named(spec)
    if name:
        return name
    if spec in EVAL_SETS:
        return spec
    if spec.startswith("hf:"):
        return "__".join(p.replace("/", "__") for p in parse_hf(spec) if p)
    return Path(spec).stem


def get_field(row: dict[str, Any], path: str) -> Any:
    """A field by dotted path (`answer.aliases`); KeyError when any step is missing."""
    node: Any = row
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(path)
        node = node[key]
    return node


def _read_file(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return list(read_jsonl(path))  # FlashRAG names its JSON-lines files .json at times
        if isinstance(data, list) and all(isinstance(r, dict) for r in data):
            return data
        raise RecordError(f"{path}: expected a JSON list of objects or JSON lines")
    return list(read_jsonl(path))


def _golds(value: Any, where: str) -> Any:
    if isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise RecordError(f"{where}: the answer must be a string or a non-empty list of strings, got {value!r:.80}")


def load_questions(
    spec: str, question_field: str = "question", answer_field: str | None = None
) -> list[dict[str, Any]]:
    """`hotpotqa|2wiki|musique|bamboogle` (bundled), `hf:NAME[:CONFIG][:SPLIT]`, or a .jsonl/.json/.parquet file.

    Each record gets `idx` (its own `idx` or `id`, else its position) plus `question` and `answer`; a
    `NAME=` before the spec only names the output."""
    spec = named(spec)[1]
    if spec in EVAL_SETS:
        rows: list[dict[str, Any]] = list(read_jsonl(eval_set_path(spec)))
    elif spec.startswith("hf:"):
        name, config, split = parse_hf(spec)
        rows = load_dataset_rows(name, config, split)[1]
    elif Path(spec).is_file():
        rows = _read_file(Path(spec))
    else:
        raise RecordError(
            f"--dataset {spec!r}: not one of {sorted(EVAL_SETS)}, not hf:NAME[:CONFIG][:SPLIT], and no such file"
        )
    out = []
    for i, row in enumerate(rows):
        where = f"{spec}: record {i + 1}"
        answer_key = answer_field or next((k for k in ANSWER_FIELDS if k in row), ANSWER_FIELDS[0])
        try:
            question, answer = get_field(row, question_field), get_field(row, answer_key)
        except KeyError as e:
            raise RecordError(
                f"{where} has no field {e.args[0]!r} (fields: {sorted(row)}); name the fields with "
                "--question-field / --answer-field"
            ) from None
        idx = next((row[k] for k in ID_FIELDS if k in row and row[k] is not None), i)
        out.append({"idx": idx, "question": str(question), "answer": _golds(answer, where)})
    if len({r["idx"] for r in out}) != len(out):
        # Resuming keys on idx; repeated ids would make finished questions hide unfinished ones.
        out = [{**r, "idx": i} for i, r in enumerate(out)]
    return out
