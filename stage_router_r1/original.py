"""Router-R1's own data: its preprocessing over FlashRAG's datasets, and the verl parquet files it writes.

Its `data_process/qa_train_merge.py` draws 7,000 questions from the train split of NQ and then of HotpotQA
(`RUC-NLPIR/FlashRAG_datasets`) with Python's `random` seeded 42, one generator for both in that order;
`qa_test_gen.py` draws 500 (all if fewer) from one set's test split, else dev, else train, seeded 42 anew
per set; `qa_test_merge.py` draws 100 each of NQ and HotpotQA for validation. Every question is stripped
and given a final `?`; the golds are FlashRAG's `golden_answers`. Here the same draws come from
`datasets.load_dataset(NAME, SET, split=...)`, NAME the hub id or a local folder laid out like it.

Its files are verl parquet rows: `data_source`, `prompt` (one user message: the template, then
`Question: ...`), `ability`, `reward_model.ground_truth.target` (the golds) and `extra_info`;
`read_verl_parquet` reads them (with `datasets`) back into questions and golds.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from searchrl.hub import HubError, load_dataset_rows
from searchrl.jsonl import RecordError
from searchrl.qa_data.verl_rows import verl_question

FLASHRAG = "RUC-NLPIR/FlashRAG_datasets"
SEED = 42
TRAIN = (("nq", 7000), ("hotpotqa", 7000))
VALIDATION = (("nq", 100), ("hotpotqa", 100))
TEST_SIZE = 500
TEST_SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def as_question(text: str) -> str:
    """The question as Router-R1 writes it into its prompt: stripped, ending in `?`."""
    text = text.strip()
    return text if text.endswith("?") else text + "?"


def test_split(name: str, dataset: str) -> str:
    """The split Router-R1 tests on: test, else dev, else train."""
    from datasets import get_dataset_split_names

    try:
        splits = get_dataset_split_names(name, dataset)
    except (OSError, ConnectionError, ValueError) as e:
        raise HubError(f"dataset {name!r} (config {dataset}): cannot list its splits: {str(e)[:200]}") from None
    split = next((s for s in ("test", "dev", "train") if s in splits), None)
    if split is None:
        raise HubError(f"dataset {name!r} (config {dataset}): no test, dev or train split among {splits}")
    return split


def rows_of(name: str, dataset: str, split: str) -> list[dict[str, Any]]:
    """FlashRAG rows (`id`, `question`, `golden_answers`) as {question, answer, query_type}."""
    out = []
    for i, row in enumerate(load_dataset_rows(name, dataset, split)[1]):
        if not isinstance(row.get("question"), str) or not row.get("golden_answers"):
            raise RecordError(f"{name} {dataset}/{split}: row {i + 1}: needs `question` and `golden_answers`")
        out.append(
            {"question": as_question(row["question"]), "answer": list(row["golden_answers"]), "query_type": dataset}
        )
    return out


def draw(rows: list[dict[str, Any]], count: int, rng: random.Random) -> list[dict[str, Any]]:
    """`count` rows in the order `rng.sample` picks their indices, as the original's `select(random.sample(...))`;
    all of them, in order, when there are fewer (its test sets take min(len, 500))."""
    if count >= len(rows):
        return list(rows)
    return [rows[i] for i in rng.sample(range(len(rows)), count)]


def recipe(name: str, flashrag: str = FLASHRAG) -> list[dict[str, Any]]:
    """`train`, `validation` or `test:SET` as the original's scripts draw them."""
    if name in ("train", "validation"):
        rng = random.Random(SEED)  # one generator across the sets, in order, as its module-level seed
        return [
            row
            for dataset, count in (TRAIN if name == "train" else VALIDATION)
            for row in draw(
                rows_of(flashrag, dataset, "train" if name == "train" else test_split(flashrag, dataset)), count, rng
            )
        ]
    kind, _, dataset = name.partition(":")
    if kind != "test" or dataset not in TEST_SETS:
        raise RecordError(f"--recipe {name!r}: expected train, validation or test:SET with SET one of {TEST_SETS}")
    return draw(rows_of(flashrag, dataset, test_split(flashrag, dataset)), TEST_SIZE, random.Random(SEED))


def is_verl_parquet(path: Path) -> bool:
    if path.suffix != ".parquet":
        return False
    import pyarrow.parquet as pq

    return {"prompt", "reward_model"} <= set(pq.read_schema(path).names)


def read_verl_parquet(path: str | Path) -> list[dict[str, Any]]:
    """Questions and golds of a Router-R1 (verl) parquet file: the question is what follows the last
    `Question:` of the user message, the golds are `reward_model.ground_truth.target`."""
    from datasets import load_dataset

    path = Path(path)
    rows = load_dataset("parquet", data_files=str(path), split="train")
    out = []
    for i, row in enumerate(rows):
        record = verl_question(row, f"{path}: row {i + 1}", path.stem)
        out.append({"question": record["question"], "answer": record["answer"], "query_type": record["data_source"]})
    return out
