"""The evaluation runner shared by `eval/run_local.py` and `eval/run_bamboogle_online.py`.

Per dataset: episodes in batches through the text-level loop, one JSON line per question appended
as soon as it finishes (so an interrupted run resumes where it stopped), a summary computed from
that file by `eval.score` itself (so the two always agree), then a Markdown table and a figure
across every dataset in the output folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from eval.generation import GenParams, HFTextEngine, OpenAICompletionsEngine, TextEngine, VLLMEngine, run_episodes
from eval.judge import LLMJudge
from eval.metrics import all_metrics, as_golds
from eval.questions import dataset_name, load_questions
from eval.report import write_reports
from eval.score import score_file
from rollout.config import EpisodeConfig, ModelConfig, load
from rollout.environment import SearchEnvironment
from rollout.protocol import parse_solution
from rollout.templates import load_tokenizer, render_prompt
from search_backend.base import SearchBackend


@dataclass(frozen=True)
class RunSettings:
    """R1-Searcher's evaluation protocol by default: top-5, up to 16 searches, greedy decoding."""

    top_k: int = 5
    max_searches: int = 16
    segment_tokens: int = 512
    temperature: float = 0.0
    batch_size: int = 32
    limit: int | None = None


def add_generation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a configs/models/*.yaml file (template and model path)")
    p.add_argument(
        "--engine",
        choices=["vllm", "openai", "hf"],
        default="vllm",
        help="vllm: offline on the GPU; openai: an OpenAI-compatible /completions endpoint; hf: transformers",
    )
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="for --engine openai (e.g. `vllm serve`)")
    p.add_argument(
        "--served-model", default=None, help="model name at the endpoint (default: the config's model_path)"
    )
    p.add_argument("--limit", type=int, default=None, help="first N questions of each dataset")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--max-searches", type=int, default=16)
    p.add_argument("--segment-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=32, help="episodes advanced together")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: runs/eval/<model name>)")
    p.add_argument("--judge-url", default=None, help="OpenAI-compatible endpoint of an LLM judge (ACC_L)")
    p.add_argument("--judge-model", default="gpt-4o-mini")
    p.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="env var holding the judge's API key")


def settings_from(args: argparse.Namespace) -> RunSettings:
    return RunSettings(
        args.top_k, args.max_searches, args.segment_tokens, args.temperature, args.batch_size, args.limit
    )


def make_engine(args: argparse.Namespace, model: ModelConfig) -> TextEngine:
    if args.engine == "openai":
        return OpenAICompletionsEngine(args.base_url, args.served_model or model.model_path)
    if args.engine == "hf":
        return HFTextEngine.from_pretrained(model.model_path)
    return VLLMEngine(model.model_path)


def make_judge(args: argparse.Namespace, out: Path) -> LLMJudge | None:
    if not args.judge_url:
        return None
    return LLMJudge(args.judge_url, args.judge_model, out / "judge_cache.sqlite", api_key_env=args.judge_key_env)


def _finished(path: Path) -> set[Any]:
    """Question ids already in the output; a line cut off by a crash is dropped so it is redone."""
    if not path.exists():
        return set()
    lines = path.read_text(encoding="utf-8").splitlines()
    good = []
    for line in lines:
        try:
            good.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    if len(good) != len([line for line in lines if line.strip()]):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in good), encoding="utf-8")
    return {r["idx"] for r in good}


async def evaluate(
    spec: str,
    model: ModelConfig,
    engine: TextEngine,
    search: SearchBackend,
    settings: RunSettings,
    out: Path,
    judge: LLMJudge | None = None,
    tokenizer: Any = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    name = dataset_name(spec)
    questions = load_questions(spec)[: settings.limit]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.jsonl"
    done = _finished(path)
    todo = [q for q in questions if q["idx"] not in done]
    env = SearchEnvironment(
        search,
        EpisodeConfig(
            top_k=settings.top_k, max_searches=settings.max_searches, max_segment_tokens=settings.segment_tokens
        ),
    )
    params = GenParams(temperature=settings.temperature, max_tokens=settings.segment_tokens)
    started = time.time()
    bar = tqdm(total=len(questions), initial=len(questions) - len(todo), desc=name, unit="q")
    with path.open("a", encoding="utf-8") as fh:
        for start in range(0, len(todo), settings.batch_size):
            batch = todo[start : start + settings.batch_size]
            prompts = [render_prompt(model, q["question"], tokenizer) for q in batch]
            results = await run_episodes(engine, env, prompts, [q["answer"] for q in batch], params)
            verdicts: list[Any] = [None] * len(batch)
            preds = [parse_solution(r.episode.solution).answer for r in results]
            if judge is not None:
                verdicts = list(
                    await asyncio.gather(
                        *(
                            judge.judge(q["question"], as_golds(q["answer"]), p or "")
                            for q, p in zip(batch, preds, strict=True)
                        )
                    )
                )
            for q, r, pred, verdict in zip(batch, results, preds, verdicts, strict=True):
                record = {
                    "idx": q["idx"],
                    "question": q["question"],
                    "answer": q["answer"],
                    "pred_ans": pred or "",
                    "has_answer": pred is not None,
                    "gen_text_store": r.episode.solution,
                    "searches": r.episode.queries,
                    "num_searches": r.episode.num_searches,
                    "search_errors": r.episode.search_errors,
                    "truncated": r.truncated,
                    "metrics": all_metrics(pred or "", as_golds(q["answer"])),
                    "judge": None if verdict is None else str(bool(verdict)),
                }
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            bar.update(len(batch))
    bar.close()
    summary = summarize(path, name, judge, settings, model, extra)
    summary["seconds_this_run"] = round(time.time() - started, 1)
    (out / f"{name}.summary.json").write_text(json.dumps(summary, indent=2))
    write_reports(out)
    return summary


def summarize(
    path: Path,
    name: str,
    judge: LLMJudge | None,
    settings: RunSettings,
    model: ModelConfig,
    extra: dict[str, Any] | None,
) -> dict[str, Any]:
    records = [json.loads(line) for line in path.open(encoding="utf-8")]
    judged = judge is not None and all(r["judge"] is not None for r in records)
    scores = score_file(str(path), pred_key="pred_ans", answer_key="answer", judge_key="judge" if judged else None)
    n = len(records)
    return {
        "dataset": name,
        **scores,
        "mean_searches": sum(r["num_searches"] for r in records) / n,
        "no_answer": sum(not r["has_answer"] for r in records),
        "search_errors": sum(r["search_errors"] for r in records),
        "judge_model": judge.model if judged and judge is not None else None,
        "model": model.name,
        "settings": asdict(settings),
        **(extra or {}),
    }


def run_all(
    specs: Sequence[str],
    args: argparse.Namespace,
    search: SearchBackend,
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    model = load(ModelConfig, args.model)
    out = args.out or Path("runs/eval") / model.name
    engine = make_engine(args, model)
    judge = make_judge(args, out)
    tokenizer = load_tokenizer(model) if model.kind == "chat" else None
    settings = settings_from(args)

    async def go() -> list[dict[str, Any]]:
        try:
            return [await evaluate(s, model, engine, search, settings, out, judge, tokenizer, extra) for s in specs]
        finally:
            for closable in (engine, judge, search):
                if closable is not None and hasattr(closable, "aclose"):
                    await closable.aclose()

    summaries = asyncio.run(go())
    for s in summaries:
        line = f"{s['dataset']}: n={s['n']} EM={100 * s['em']:.1f} CEM={100 * s['cem']:.1f} F1={100 * s['f1']:.1f}"
        if "acc_l" in s:
            line += f" ACC_L={100 * s['acc_l']:.1f}"
        print(line + f" searches/q={s['mean_searches']:.2f}")
    print(f"results: {out / 'results.md'}, {out / 'results.png'}")
    return summaries
