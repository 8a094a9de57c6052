"""Evaluation suites: a named set of datasets run in one command and reported in the layout its paper uses.

`search-r1` is the seven sets of Search-R1's table (and of ZeroSearch, StepSearch and the others that copy it),
read from FlashRAG's copies the way Search-R1's `qa_search_test_merge.py` reads them: a set's test split where it
has one, else its dev split; the question stripped and ended with "?". Its EM is that script's: SQuAD
normalisation (punctuation deleted, not turned into spaces as in R1-Searcher's EM), the answer matched against
every gold answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.jsonl import RecordError
from searchrl.reward.router_r1 import exact_match as squad_exact_match

FLASHRAG_REPO = "RUC-NLPIR/FlashRAG_datasets"


@dataclass(frozen=True)
class SuiteSet:
    name: str  # the output files' name
    label: str  # the paper table's column
    config: str  # FlashRAG's folder (a Hugging Face config)
    split: str
    group: str  # Search-R1 splits its table into general and multi-hop QA


SUITES: dict[str, tuple[SuiteSet, ...]] = {
    "search-r1": (
        SuiteSet("nq", "NQ", "nq", "test", "general"),
        SuiteSet("triviaqa", "TriviaQA", "triviaqa", "test", "general"),
        SuiteSet("popqa", "PopQA", "popqa", "test", "general"),
        SuiteSet("hotpotqa", "HotpotQA", "hotpotqa", "dev", "multi-hop"),
        SuiteSet("2wiki", "2wiki", "2wikimultihopqa", "dev", "multi-hop"),
        SuiteSet("musique", "Musique", "musique", "dev", "multi-hop"),
        SuiteSet("bamboogle", "Bamboogle", "bamboogle", "test", "multi-hop"),
    )
}


def suite_specs(suite: str, data_dir: Path | None) -> list[str]:
    """The suite's datasets as `NAME=SPEC` for the evaluation's loader: FlashRAG's files under `data_dir`
    (its own layout, `<set>/<split>.jsonl`), else the hub copies."""
    if suite not in SUITES:
        raise RecordError(f"--suite {suite!r}: not one of {sorted(SUITES)}")
    specs = []
    for s in SUITES[suite]:
        if data_dir is None:
            specs.append(f"{s.name}=hf:{FLASHRAG_REPO}:{s.config}:{s.split}")
            continue
        path = data_dir / s.config / f"{s.split}.jsonl"
        if not path.is_file():
            raise RecordError(
                f"--suite-dir {data_dir}: no {s.config}/{s.split}.jsonl ({s.label}); FlashRAG's copies: "
                f"huggingface-cli download {FLASHRAG_REPO} --repo-type dataset --include '{s.config}/*' "
                f"--local-dir {data_dir}"
            )
        specs.append(f"{s.name}={path}")
    return specs


def search_r1_question(question: str) -> str:
    """The question as Search-R1's data script writes it into the prompt."""
    question = question.strip()
    return question if question.endswith("?") else question + "?"


def sample(questions: list[dict[str, Any]], size: int, seed: int, name: str) -> list[dict[str, Any]]:
    """`size` questions drawn with `seed` (all of them when the set is smaller), kept in the set's order. Each set
    draws from its own generator, so adding a set to a run leaves the others' samples as they were."""
    if size >= len(questions):
        return questions
    keep = set(random.Random(f"{seed}:{name}").sample(range(len(questions)), size))
    return [q for i, q in enumerate(questions) if i in keep]


def suite_em(records: list[dict[str, Any]]) -> float:
    """The suite paper's EM over an output file's records."""
    golds = [[r["answer"]] if isinstance(r["answer"], str) else r["answer"] for r in records]
    return sum(squad_exact_match(r["pred_ans"], g) for r, g in zip(records, golds, strict=True)) / max(1, len(records))


def table(suite: str, summaries: list[dict[str, Any]]) -> str | None:
    """The suite's results in its paper's layout (EM to three decimals, the sets in its order, their average),
    or None when no summary belongs to it. A set not (yet) run is a dash, and then there is no average."""
    sets = SUITES[suite]
    by_name = {s["dataset"]: s for s in summaries if s.get("suite") == suite}
    if not by_name:
        return None
    cells, ems = [], []
    for s in sets:
        got = by_name.get(s.name)
        cells.append("–" if got is None else f"{got['suite_em']:.3f}")
        if got is not None:
            ems.append(got["suite_em"])
    avg = f"{sum(ems) / len(ems):.3f}" if len(ems) == len(sets) else "–"
    model = next(iter(by_name.values())).get("model", "?")
    head = "| model | " + " | ".join(s.label for s in sets) + " | Avg. |"
    rows = [head, "|---|" + "---|" * (len(sets) + 1), f"| {model} | " + " | ".join(cells) + f" | {avg} |"]
    ran = [by_name[s.name] for s in sets if s.name in by_name]
    return "\n".join(rows) + "\n\n" + caption(suite, ran) + "\n"


def caption(suite: str, summaries: list[dict[str, Any]]) -> str:
    sets = SUITES[suite]
    general = ", ".join(s.label for s in sets if s.group == "general")
    multi = ", ".join(s.label for s in sets if s.group == "multi-hop")
    sizes = ", ".join(f"{s['dataset']} {s['n']} of {s.get('population', s['n'])}" for s in summaries)
    sampled = [s for s in summaries if s.get("n", 0) < s.get("population", 0)]
    seed = next((s["settings"].get("sample_seed") for s in sampled if s.get("settings")), None)
    how = (f"A sample, not the full splits (seed {seed}): {sizes} questions." if sampled
           else f"The full splits: {sizes} questions.")  # fmt: skip
    return (
        f"Exact match as in {suite}'s evaluation (SQuAD normalisation), on FlashRAG's copies; general QA: "
        f"{general}; multi-hop QA: {multi}. {how}"
    )
