"""Preparing OpenRLHF's prompt dataset from questions and answers (R1-Searcher's format).

Each output line is `{"prompt": <rendered with the model's template>, "label": <gold answer(s)>}`
plus the question and, for stage 1, its difficulty bucket. Duplicates and questions that also
appear in the four evaluation sets (leakage) are reported, and dropped unless asked otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from searchrl.config import ConfigError, load
from searchrl.hub import HubError, load_dataset_rows
from searchrl.jsonl import RecordError, read_jsonl
from searchrl.metrics import EmptyGoldError, as_golds, best_over_golds, normalize_answer
from searchrl.protocols import DEFAULT_PROTOCOL, get_protocol
from searchrl.qa_data.eval_sets import EVAL_SETS, eval_set_path
from searchrl.qa_data.verl_rows import is_verl_row, verl_question
from searchrl.stage.config import STAGES, ModelConfig, StageConfig, resolve_model_path
from searchrl.stage.templates import (
    effective_model,
    load_tokenizer,
    prompt_end,
    render_messages,
    render_prompt,
    template_fingerprint,
)

DEFAULT_BUCKETS = "hard:0-2,medium:3-6,easy:7-10"
DEFAULT_MODEL = "configs/models/qwen2.5-7b-base.yaml"


def read_questions(source: str, split: str, question_key: str, answer_key: str) -> Iterator[dict[str, Any]]:
    """Records from a local JSONL or parquet file, or else a Hugging Face dataset name. verl's prompt-dataset rows
    (Search-R1's and Router-R1's published data) are read as their question, golds and data source."""
    path = Path(source)
    if path.is_file() and path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows: Iterable[dict[str, Any]] = pq.read_table(path).to_pylist()
    elif path.is_file():
        rows = read_jsonl(source)
    else:
        rows = load_dataset_rows(source, None, split)[1]
    for i, row in enumerate(rows, start=1):
        if is_verl_row(row):
            row = verl_question(row, f"{source}: record {i}", path.stem)
            question_key, answer_key = "question", "answer"
        if question_key not in row or answer_key not in row:
            raise RecordError(
                f"{source}: record {i}: needs keys {question_key!r} and {answer_key!r}; got {sorted(row)}"
            )
        yield row


def question_key_of(question: str) -> str:
    return normalize_answer(question)


def eval_questions() -> dict[str, set[str]]:
    return {name: {question_key_of(r["question"]) for r in read_jsonl(eval_set_path(name))} for name in EVAL_SETS}


def parse_buckets(spec: str) -> list[tuple[str, int, int]]:
    buckets = []
    for part in spec.split(","):
        name, _, span = part.partition(":")
        low, _, high = span.partition("-")
        if not (name and low.isdigit() and high.isdigit()):
            raise ConfigError(f"--buckets: `{part}` is not name:low-high (e.g. {DEFAULT_BUCKETS})")
        buckets.append((name.strip(), int(low), int(high)))
    return buckets


def parse_mix(spec: str, names: list[str]) -> dict[str, float]:
    mix = {}
    for part in spec.split(","):
        name, _, share = part.partition("=")
        if name not in names:
            raise ConfigError(f"--mix: unknown bucket {name!r}; buckets are {names}")
        try:
            mix[name] = float(share)
        except ValueError:
            raise ConfigError(f"--mix: `{part}` is not name=share") from None
    total = sum(mix.values())
    if total <= 0:
        raise ConfigError("--mix: the shares must add up to more than 0")
    return {k: v / total for k, v in mix.items()}


def difficulty(row: dict[str, Any], golds: list[str], metric: str) -> int | None:
    """How many recorded rollouts (`pred_anses`) were right; None when there are none."""
    preds = row.get("pred_anses")
    if not isinstance(preds, list) or not preds:
        return None
    return sum(best_over_golds(metric, str(p or ""), golds) >= 1.0 for p in preds)


def mix_buckets(rows: list[dict[str, Any]], mix: dict[str, float], size: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    by_bucket: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_bucket.setdefault(row["bucket"], []).append(row)
    chosen = []
    for name, share in mix.items():
        pool = by_bucket.get(name, [])
        want = round(share * size)
        if want > len(pool):
            print(f"[prepare] bucket {name}: wanted {want}, only {len(pool)} available; taking all", file=sys.stderr)
        chosen += rng.sample(pool, min(want, len(pool)))
    rng.shuffle(chosen)
    return chosen


def prompt_model(
    model_file: str | None, config: str | None, overrides: Sequence[str] = ()
) -> tuple[ModelConfig, str, str | None]:
    """The model config whose prompt the data is rendered with, its file and what every prompt ends with: `--model`
    as written (R1-Searcher's protocol), or, with `--config` (and its `overrides`), the stage config's own prompt
    (e.g. RAG-R1's multi-query rules) or its protocol's instruction (Search-R1's) over its model."""
    if config is None:
        if overrides:
            raise ConfigError(f"{' '.join(overrides)}: overrides of a stage config; give the stage with --config")
        path = model_file or DEFAULT_MODEL
        return load(ModelConfig, path), path, get_protocol(DEFAULT_PROTOCOL).PROMPT_END
    stage = load(StageConfig, config, overrides)
    path = model_file or str(resolve_model_path(config, stage.model))
    try:
        return effective_model(load(ModelConfig, path), stage), path, prompt_end(stage)
    except ValueError as e:
        raise ConfigError(f"{config}: {e}") from None


def prepare(args: argparse.Namespace, stage: str) -> dict[str, Any]:
    model, model_file, end = prompt_model(args.model, args.config, args.overrides)
    tokenizer = load_tokenizer(model) if model.kind == "chat" else None
    leaks = eval_questions()
    buckets = parse_buckets(args.buckets) if stage == "stage1_format" else []
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    tally = _Tally()
    questions = read_questions(args.input, args.split, args.question_key, args.answer_key)
    for number, row in enumerate(tqdm(questions, desc="questions"), start=1):
        question = str(row[args.question_key]).strip()
        key = question_key_of(question)
        if key in seen:
            tally.duplicates += 1
            if not args.keep_duplicates:
                continue
        seen.add(key)
        hits = [name for name, qs in leaks.items() if key in qs]
        tally.leaked.update(hits)
        if hits and not args.keep_leaked:
            continue
        golds = _gold_answers(row, number, args, tally)
        if golds is None:
            continue
        own = row.get("messages") if args.own_prompt else None
        tally.own_prompts += bool(own)
        prompt = render_messages(model, own, tokenizer, end) if own else render_prompt(model, question, tokenizer, end)
        out = {
            "prompt": prompt,
            "label": golds[0] if len(golds) == 1 else json.dumps(golds),
            "question": question,
        }
        if row.get("data_source"):
            # OpenRLHF's evaluation reports its figures by `datasource`, as verl's validation does by data_source.
            out["data_source"] = out["datasource"] = row["data_source"]
        if buckets:
            right = difficulty(row, golds, args.correct_metric)
            out["bucket"] = next((n for n, lo, hi in buckets if right is not None and lo <= right <= hi), "unknown")
        rows.append(out)
    if buckets and args.mix:
        rows = mix_buckets(rows, parse_mix(args.mix, [b[0] for b in buckets]), args.size or len(rows), args.seed)
    read = len(rows)
    if getattr(args, "steps", None):
        rows = passes(rows, args.steps * args.prompts_per_step, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    report = _report(args, stage, model, model_file, rows, read, tally)
    if buckets:
        report["buckets"] = dict(Counter(r["bucket"] for r in rows))
    args.out.with_suffix(".report.json").write_text(json.dumps(report, indent=2))
    return report


@dataclass
class _Tally:
    """What reading the questions counted on the way, for the report."""

    duplicates: int = 0
    own_prompts: int = 0
    leaked: Counter[str] = field(default_factory=Counter)
    empty_golds: list[int] = field(default_factory=list)
    no_gold: list[int] = field(default_factory=list)


def _gold_answers(row: dict[str, Any], number: int, args: argparse.Namespace, tally: _Tally) -> list[str] | None:
    """The row's golds; None for a row left without one."""
    try:
        return as_golds(row[args.answer_key])
    except EmptyGoldError:
        # A gold that normalises to nothing ("The", "!") would pay an empty answer: left out, the row kept
        # while a gold remains (Search-R1's published data holds a few such rows).
        try:
            golds = as_golds(row[args.answer_key], drop_empty=True)
            tally.empty_golds.append(number)
            return golds
        except EmptyGoldError:
            tally.no_gold.append(number)
            return None
    except TypeError as e:
        raise RecordError(f"{args.input}: record {number}: {args.answer_key}: {e}") from None


def _report(
    args: argparse.Namespace,
    stage: str,
    model: ModelConfig,
    model_file: str,
    rows: list[dict[str, Any]],
    read: int,
    tally: _Tally,
) -> dict[str, Any]:
    """What was written and what was left out on the way (the report beside the data, and `prepare`'s answer)."""
    return {
        "stage": stage,
        "input": args.input,
        "model": model.name,
        "model_config": model_file,
        "stage_config": args.config,
        **({"stage_overrides": list(args.overrides)} if args.overrides else {}),
        "template_sha256": template_fingerprint(model),
        "written": len(rows),
        **(
            {"steps": {"steps": args.steps, "prompts_per_step": args.prompts_per_step, "questions": read}}
            if getattr(args, "steps", None)
            else {}
        ),
        # Prompts rendered from a published row's own messages (`data prepare search_r1`), the rest rebuilt.
        "own_prompts": tally.own_prompts,
        "duplicates": tally.duplicates,
        "duplicates_dropped": not args.keep_duplicates,
        "leaked_into_eval_sets": dict(tally.leaked),
        "leaked_dropped": not args.keep_leaked,
        # Records (numbered from 1) whose golds that normalise to nothing were left out, and those left with none.
        "empty_golds_dropped": {"records": len(tally.empty_golds), "first": tally.empty_golds[:10]},
        "skipped_without_gold": {"records": len(tally.no_gold), "first": tally.no_gold[:10]},
        "out": str(args.out),
    }


def passes(rows: list[dict[str, Any]], total: int, seed: int) -> list[dict[str, Any]]:
    """`total` rows drawn pass by pass, each pass a fresh seeded shuffle of them all and the last one cut, as verl's
    sampler draws epochs until its `total_training_steps` stops it: every question seen as often, give or take one."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    while len(out) < total:
        order = list(rows)
        rng.shuffle(order)
        out += order[: total - len(out)]
    return out


def build_parser(stage: str, command: str | None = None, config: str | None = None) -> argparse.ArgumentParser:
    """`command`: the name after `searchrl data prepare` (default: the stage's); `config`: the default `--config`."""
    p = argparse.ArgumentParser(
        prog=f"searchrl data prepare {command or next((k for k, v in STAGES.items() if v == stage), stage)}",
        description=f"Build the {stage} prompt dataset for OpenRLHF (`prompt`, `label`) from questions and answers.",
    )
    p.add_argument(
        "--input",
        required=True,
        help="a local JSONL (question, answer[, pred_anses]) or parquet file, or an HF dataset name; verl rows "
        "(Search-R1's and Router-R1's data: prompt, reward_model.ground_truth.target, data_source) are read as such",
    )
    p.add_argument("--model", default=None, help=f"model config whose template is used (default {DEFAULT_MODEL})")
    p.add_argument(
        "--config",
        default=config,
        help="a stage config with its own prompt or protocol (configs/stages/rag_r1.yaml, search_r1.yaml): its "
        f"prompt over its model, in its protocol (default {config})",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="overrides of the --config stage, as `searchrl stage` takes them (e.g. protocol=search-r1 "
        "reward.protocol=search-r1 episode.max_turns=2)",
    )
    p.add_argument("--out", type=Path, required=True, help="output JSONL; a .report.json is written beside it")
    p.add_argument("--split", default="train", help="split, for a Hugging Face dataset")
    p.add_argument("--question-key", default="question")
    p.add_argument("--answer-key", default="answer")
    p.add_argument("--keep-duplicates", action="store_true", help="keep repeated questions (reported either way)")
    p.add_argument("--keep-leaked", action="store_true", help="keep questions found in the evaluation sets")
    if command == "search_r1":
        p.add_argument(
            "--rebuild-prompt",
            dest="own_prompt",
            action="store_false",
            help="rebuild each verl row's prompt from its question with Search-R1's instruction (default: render the "
            "row's own messages, its instruction and any system turn, as Search-R1's data loader does)",
        )
        p.add_argument(
            "--steps",
            type=int,
            default=None,
            help="write exactly STEPS x --prompts-per-step prompts, pass after shuffled pass over the questions, so "
            "one OpenRLHF episode is that many steps (Search-R1's train_grpo.sh: 1005; default: each question once)",
        )
        p.add_argument("--prompts-per-step", type=int, default=512, help="prompts a step (rollout.batch_size)")
    else:
        p.set_defaults(own_prompt=False)
    if stage == "stage1_format":
        p.add_argument("--buckets", default=DEFAULT_BUCKETS, help="difficulty buckets by rollouts right (%(default)s)")
        p.add_argument("--mix", default=None, help="bucket shares, e.g. hard=0.4,medium=0.4,easy=0.2 (default: all)")
        p.add_argument(
            "--size", type=int, default=None, help="questions to draw with --mix (default: as many as read)"
        )
        p.add_argument("--correct-metric", choices=["em", "cem", "f1"], default="cem", help="when a rollout is right")
    if stage == "stage1_format" or command == "search_r1":
        p.add_argument("--seed", type=int, default=0)
    return p


def main(stage: str, argv: list[str] | None = None, command: str | None = None, config: str | None = None) -> int:
    args = build_parser(stage, command, config).parse_args(argv)
    try:
        report = prepare(args, stage)
    except (ConfigError, RecordError, HubError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    return 0
