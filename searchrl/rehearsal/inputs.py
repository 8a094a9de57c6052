"""What the rehearsals run on: the rehearsal corpus (the bundled mini KILT corpus and fictional people of
`examples/fictional/`: training's holds the training people alone, evaluation's every split) and its index, built by
`searchrl index build`, and a stage's training questions and prompts, prepared by the stage's own data preparation.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from searchrl.paths import EXAMPLES, ROOT, RUNS
from searchrl.process import searchrl_command
from searchrl.qa_data.fictional import SPLITS
from searchrl.search.base import r1_text
from searchrl.search.index.corpus import file_sha256
from searchrl.search.index.layout import MANIFEST, MANIFEST_VERSION
from searchrl.search.local_faiss import LocalFaissBackend
from searchrl.stage.config import STAGES, stage_package
from searchrl.tiny_policy.mixture import HELDOUT_STAGE1

REHEARSAL_DIR = RUNS / "rehearse"
# The rehearsal's questions: stage 1 on the real stage-1 questions (the last HELDOUT_STAGE1 are kept for
# evaluation) and the fictional training people, stage 2 on the fictional training people, whose birthplaces
# only the retrieved passages name.
STAGE1_QUESTIONS = EXAMPLES / "stage_1.jsonl"
FICTIONAL = EXAMPLES / "fictional"
# Whose passages each index holds: training's the training people alone, evaluation's every split.
TRAINING_SPLITS = ("train",)
EVERYONE = SPLITS


def people_of(splits: Sequence[str]) -> frozenset[str]:
    """The names of the fictional people of `splits`."""
    return frozenset(
        json.loads(line)["person"]
        for split in splits
        for line in (FICTIONAL / f"{split}.jsonl").open(encoding="utf-8")
    )


def rehearsal_corpus(work: Path, splits: Sequence[str] = TRAINING_SPLITS) -> Path:
    """The mini KILT corpus and the passages of the fictional people of `splits` in one JSONL corpus (rewritten
    only when it changes)."""
    people = people_of(splits)
    lines = (FICTIONAL / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    fictional = "".join(line for line in lines if json.loads(line)["title"] in people)
    text = (EXAMPLES / "mini_corpus.jsonl").read_text(encoding="utf-8") + fictional
    out = work / f"corpus{suffix(splits)}.jsonl"
    if not out.is_file() or out.read_text(encoding="utf-8") != text:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return out


def suffix(splits: Sequence[str]) -> str:
    return "" if tuple(splits) == TRAINING_SPLITS else "-" + "-".join(splits)


def rehearsal_index(work: Path = REHEARSAL_DIR, splits: Sequence[str] = TRAINING_SPLITS) -> Path:
    """`searchrl index build` over the rehearsal corpus of `splits`, shared by every rehearsal, and left untouched
    while it is finished and built from this corpus. One caller at a time (a file lock): jobs run side by side share
    it. Training reads the training people's index (the default): no passage of a development or held-out person
    can reach an episode it trains on; evaluations read `EVERYONE`'s."""
    work.mkdir(parents=True, exist_ok=True)
    with (work / "index.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        index = work / f"index{suffix(splits)}"
        corpus = rehearsal_corpus(work, splits)
        if built_from(index, corpus):
            return index
        cmd = [sys.executable, "-m", "searchrl.search.index.build", "--corpus", str(corpus), "--format", "jsonl"]
        done = subprocess.run([*cmd, "--out", str(index)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"searchrl index build failed: {done.stderr[-2000:]}")
    return index


def built_from(index: Path, corpus: Path) -> bool:
    """Whether `index` is a finished build of this layout from `corpus`. The builder resumes an up-to-date index
    in seconds, but it takes the manifest away while it checks: a server another job had just started on the
    index then found no manifest and exited (it failed a CI run with the two lanes side by side)."""
    try:
        manifest = json.loads((index / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return manifest.get("version") == MANIFEST_VERSION and manifest.get("corpus", {}).get("sha256") == file_sha256(
        corpus
    )


def passage_retriever(index: Path, top_k: int = 3) -> Callable[[list[str]], list[list[str]]]:
    """Queries -> the texts of their top passages in `index`, as the environment shows them (R1-Searcher's
    `Title: ... Text: ...`): the documents of the warm start's and the SFT rehearsal's trajectories."""
    backend = LocalFaissBackend(index)
    return lambda queries: [[r1_text(p) for p in hits] for hits in asyncio.run(backend.search(queries, top_k))]


def stage_questions(stage: str, count: int) -> list[dict[str, Any]]:
    """`count` training questions for the stage, repeated in order when the split is smaller. Stage 1 alternates
    real questions with the fictional training people: its reward pays any well-formed search, and without
    their questions in its batches the warm start's habit of naming the person in the query wears off (0.5 ->
    0.1 of held-out searches in 8 steps), leaving stage 2 nothing to read."""
    people = [json.loads(line) for line in (FICTIONAL / "train.jsonl").open(encoding="utf-8")]
    people = [{"question": r["question"], "answer": r["answer"]} for r in people]
    if stage != "stage1_format":
        return [people[i % len(people)] for i in range(count)]
    real = [json.loads(line) for line in STAGE1_QUESTIONS.open(encoding="utf-8")][:-HELDOUT_STAGE1]
    real = [{"question": r["question"], "answer": r["answer"], "pred_anses": r.get("pred_anses")} for r in real]
    return [real[i // 2 % len(real)] if i % 2 == 0 else people[i // 2 % len(people)] for i in range(count)]


def prepare_name(package: str) -> str:
    """The `searchrl data prepare` name of the stage folder `package` (`stage1_format` -> `stage1`)."""
    names = {stage_package(config): name for name, config in STAGES.items()}
    if package not in names:
        raise ValueError(f"no `searchrl data prepare` command for the stage folder {package!r}")
    return names[package]


def prepare_prompts(
    stage: str,
    model_config: str,
    count: int,
    out_dir: Path,
    package: str | None = None,
    config: Path | None = None,
    overrides: Sequence[str] = (),
) -> Path:
    """The stage's prompt dataset, made by the stage's own data preparation (`package`'s, default the stage's), with
    the stage config's own prompt or protocol (under `overrides`) when `config` is given."""
    questions = out_dir / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in stage_questions(stage, count)), encoding="utf-8")
    data = out_dir / "prompts.jsonl"
    cmd = searchrl_command("data", "prepare", prepare_name(package or stage_package(stage)))
    cmd += ["--input", str(questions), "--out", str(data)]
    cmd += ["--model", model_config, "--keep-leaked", "--keep-duplicates"]
    cmd += ["--config", str(config), *overrides] if config is not None else []
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"data preparation failed: {done.stderr[-2000:]}")
    return data
