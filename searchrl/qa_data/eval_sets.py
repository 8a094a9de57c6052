"""The four evaluation sets of the R1-Searcher paper, bundled in `eval/data/`: the one registry of their names and
files, read by the evaluation's question loader and by data preparation (which drops training questions that
leak into them)."""

from __future__ import annotations

from pathlib import Path

from searchrl.paths import ROOT

DATA_DIR = ROOT / "eval" / "data"
EVAL_SETS = {"hotpotqa": "hotpotqa_500", "2wiki": "2wiki_500", "musique": "musique_500", "bamboogle": "bamboogle"}


def eval_set_path(name: str) -> Path:
    """The bundled JSONL file of an evaluation set named in EVAL_SETS."""
    return DATA_DIR / f"{EVAL_SETS[name]}.jsonl"
