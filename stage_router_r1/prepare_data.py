"""`python -m stage_router_r1.prepare_data --mix stage1=400 --mix hotpotqa=100 --out FILE [--test-out FILE]`:
the routing stage's training (and test) prompt data; `--recipe train|validation|test:SET` draws Router-R1's
own sets instead (7K NQ + 7K HotpotQA for training, 500 of a test set; stage_router_r1/original.py).

Reads routing records (`query`, `query_type`, `candidate_models`, `ground_truth`, `optimal_model`;
validated, errors naming line and field), Router-R1's verl parquet files or question/answer sets, mixes them, renders
each question with the stage's prompt (the pool listed with prices), and writes OpenRLHF's prompt
dataset: `prompt`, `label`, plus `question`, `query_type`, `candidate_models` and `optimal_model`.
`--label-optimal` asks the pool, cheapest model first, which model is the cheapest to answer right.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm import tqdm

from searchrl.config import ConfigError, load
from searchrl.hub import HubError
from searchrl.jsonl import RecordError
from searchrl.metrics import as_golds, best_over_golds
from searchrl.qa_data.prompt_data import eval_questions, question_key_of
from searchrl.routing.llm_router import LLMRouterBackend, RouterConfig
from searchrl.search.base import SearchError
from searchrl.stage.config import ModelConfig, StageConfig, resolve_model_path
from searchrl.stage.templates import effective_model, load_tokenizer, prompt_end, render_prompt, template_fingerprint
from stage_router_r1.data import SOURCES, RouterRecord, draw, load_source, parse_mix, pool_candidates
from stage_router_r1.original import FLASHRAG, TEST_SETS
from stage_router_r1.original import recipe as original_recipe

DEFAULT_CONFIG = "configs/stages/router_r1.yaml"


async def label_optimal(records: list[RouterRecord], pool: RouterConfig, metric: str) -> None:
    """Set `optimal_model`: each record's candidates asked in ascending cost until one answers right
    (`metric` of its answer against the golds is 1); None when none does."""
    backend = LLMRouterBackend(pool)
    try:
        todo = list(range(len(records)))
        costs = {m.name: m.price_per_1k_prompt + m.price_per_1k_completion for m in pool.models}
        with tqdm(total=len(records), desc="optimal model") as bar:
            for name in sorted(costs, key=lambda n: costs[n]):
                asking = [i for i in todo if name in {c.name for c in records[i].candidate_models}]
                answers = await backend.search([f"{name}: {records[i].query}" for i in asking], 1)
                right = {
                    i
                    for i, found in zip(asking, answers, strict=True)
                    if best_over_golds(metric, found[0].text, as_golds(records[i].ground_truth)) >= 1.0
                }
                for i in right:
                    records[i].optimal_model = name
                bar.update(len(right))
                todo = [i for i in todo if i not in right]
            for i in todo:
                records[i].optimal_model = None
    finally:
        await backend.aclose()


def to_line(record: RouterRecord, model: ModelConfig, tokenizer: Any, end: str | None) -> dict[str, Any]:
    golds = as_golds(record.ground_truth)
    return {
        "prompt": render_prompt(model, record.query, tokenizer, end),
        "label": golds[0] if len(golds) == 1 else json.dumps(golds),
        "question": record.query,
        "query_type": record.query_type,
        "candidate_models": [c.model_dump() for c in record.candidate_models],
        "optimal_model": record.optimal_model,
    }


def write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    tmp.replace(path)


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    stage = load(StageConfig, args.config)
    if stage.search.router is None:
        raise ConfigError(f"{args.config}: search.router: the pool is needed (backend: router)")
    pool = stage.search.router
    model = effective_model(load(ModelConfig, args.model or resolve_model_path(args.config, stage.model)), stage)
    tokenizer = load_tokenizer(model) if model.kind == "chat" else None
    rng = random.Random(args.seed)
    sources = [(path, None) for path in args.input] + parse_mix(args.mix)
    records: list[RouterRecord] = []
    if args.recipe:
        # The original's draw, order and question form; nothing dropped, nothing held out, nothing reshuffled.
        if sources or args.test_out:
            raise RecordError("--recipe draws Router-R1's own set: give it without --input, --mix or --test-out")
        candidates = pool_candidates(pool)
        records = [
            RouterRecord(
                query=r["question"], query_type=r["query_type"], candidate_models=candidates, ground_truth=r["answer"]
            )
            for r in original_recipe(args.recipe, args.flashrag)
        ]
        args.keep_duplicates = args.keep_leaked = True
    elif not sources:
        raise RecordError("give --input FILE and/or --mix SOURCE=N (e.g. --mix stage1=400 --mix hotpotqa=100)")
    for source, count in tqdm(sources, desc="sources", disable=len(sources) < 2):
        records += draw(load_source(source, pool), count, rng)
    seen: set[str] = set()
    kept, duplicates = [], 0
    for r in records:
        key = question_key_of(r.query)
        if key in seen:
            duplicates += 1
            if not args.keep_duplicates:
                continue
        seen.add(key)
        kept.append(r)
    if not args.recipe:
        rng.shuffle(kept)
    test = kept[: args.test_size] if args.test_out else []
    train = kept[len(test) :]
    # Leakage matters for what is trained on; a test split may well be drawn from an evaluation set.
    leaks = eval_questions()
    leaked: Counter[str] = Counter()
    clean = []
    for r in train:
        hits = [name for name, qs in leaks.items() if question_key_of(r.query) in qs]
        leaked.update(hits)
        if not hits or args.keep_leaked:
            clean.append(r)
    if args.label_optimal:
        asyncio.run(label_optimal(clean + test, pool, args.metric))
    outputs = [(args.out, clean)] + ([(args.test_out, test)] if args.test_out else [])
    for path, rows in outputs:
        end = prompt_end(stage)
        write(path, [to_line(r, model, tokenizer, end) for r in tqdm(rows, desc=path.name)])
    report = {
        "stage": stage.stage,
        "config": str(args.config),
        "recipe": args.recipe,
        "model": model.name,
        "template_sha256": template_fingerprint(model),
        "pool": [m.name for m in pool.models],
        "written": len(clean),
        "query_types": dict(Counter(r.query_type for r in clean)),
        "test_written": len(test),
        "duplicates": duplicates,
        "duplicates_dropped": not args.keep_duplicates,
        "leaked_into_eval_sets": dict(leaked),
        "leaked_dropped": not args.keep_leaked,
        "optimal_models": dict(Counter(str(r.optimal_model) for r in clean)) if args.label_optimal else None,
        "out": str(args.out),
        "test_out": str(args.test_out) if args.test_out else None,
    }
    for path, _ in outputs:
        path.with_suffix(".report.json").write_text(json.dumps(report, indent=2))
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl data prepare router_r1",
        description="Build Router-R1's prompt data (training, and optionally test) for OpenRLHF.",
        epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", default=DEFAULT_CONFIG, help="the stage config: pool and prompt (%(default)s)")
    p.add_argument("--model", default=None, help="a configs/models/*.yaml file (default: the stage config's)")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        help="a JSON/JSONL file in Router-R1's shape, or of question/answer records (all of it; repeatable)",
    )
    p.add_argument(
        "--mix",
        action="append",
        default=[],
        metavar="SOURCE=N",
        help=f"draw N (or `all`) questions from SOURCE: {', '.join(SOURCES)}, a file, or hf:NAME[:CONFIG][:SPLIT] "
        "(e.g. hf:nq_open:train); repeatable",
    )
    p.add_argument(
        "--recipe",
        default=None,
        metavar="SET",
        help="Router-R1's own set: train (7K NQ + 7K HotpotQA), validation (100 + 100) or test:SET, SET one of "
        f"{', '.join(TEST_SETS)} (500 questions); drawn from --flashrag",
    )
    p.add_argument(
        "--flashrag",
        default=FLASHRAG,
        help="the FlashRAG datasets: the hub id (%(default)s) or a local folder laid out like it",
    )
    p.add_argument("--out", type=Path, required=True, help="training JSONL; a .report.json is written beside it")
    p.add_argument("--test-out", type=Path, default=None, help="also write a held-out test JSONL")
    p.add_argument("--test-size", type=int, default=100, help="questions held out for --test-out (%(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-duplicates", action="store_true", help="keep repeated questions (reported either way)")
    p.add_argument("--keep-leaked", action="store_true", help="keep training questions found in the eval sets")
    p.add_argument("--label-optimal", action="store_true", help="ask the pool for each question's optimal_model")
    p.add_argument("--metric", choices=["em", "f1", "cem"], default="cem", help="--label-optimal: when it is right")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = prepare(args)
    except (ConfigError, RecordError, HubError, SearchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
