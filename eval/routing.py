r"""Evaluate a routing policy (Router-R1) against fixed routing baselines, in the same run, on the same pool.

    python -m eval.routing --config configs/stages/router_r1.yaml --data runs/data/router_r1_test.jsonl \
        --out runs/eval/routing [--engine replay --recordings FILE | --engine openai --base-url URL | \
        --engine hf --model CHECKPOINT --template base] [--loopback | --pool-url URL] [--limit N]

The policy runs the stage's episode (its prompt lists the pool; it routes with `model: question`) through
the same environment step as training. The baselines ask one model the question directly, once (Router-R1's
single-round routing on the same pool): each pool model alone, a model drawn at random per question, and
the oracle router (per question the cheapest model that answers it right, from the single-model runs; an
upper bound no single-round router beats). For each: Router-R1's EM and F1 (its qa_em.py: SQuAD
normalisation), this project's EM / F1 / cover-EM (R1-Searcher's), cost per question, calls per question
(its route count) and the share of calls per model. Writes `routing.json`, `records.jsonl`, `routing.md`
(the table) and `routing.png` (quality against cost). `--loopback` serves the pool on loopback from the
data's own golds (searchrl/routing/loopback_pool.py: canned answers, right more often for dearer models);
`--pool-url` sends every pool model to one OpenAI-compatible server; by default the pool's own endpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from eval.generation import GenParams, run_episodes
from eval.models import resolve_model, template_config
from eval.runner import make_engine
from searchrl.config import ConfigError, load
from searchrl.jsonl import RecordError
from searchrl.metrics import all_metrics, as_golds
from searchrl.process import stop
from searchrl.protocols import get_protocol
from searchrl.reward import router_r1
from searchrl.rollout.environment import SearchEnvironment
from searchrl.routing.llm_router import LLMRouterBackend, RouterConfig
from searchrl.routing.loopback_pool import repoint, start_loopback
from searchrl.search.base import SearchError
from searchrl.stage.config import StageConfig, resolve_model_path
from searchrl.stage.templates import effective_model, load_tokenizer, render_prompt

METRICS = ("rr_em", "rr_f1", "em", "f1", "cem")
LABELS = {"rr_em": "EM (Router-R1)", "rr_f1": "F1 (Router-R1)", "em": "EM", "f1": "F1", "cem": "CEM"}


@dataclass
class Tally:
    """One routing policy's results over the questions."""

    name: str
    kind: str  # "policy" or "baseline"
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, question: str, golds: list[str], answer: str | None, calls: list[str], cost: float) -> None:
        self.records.append(
            {
                "policy": self.name,
                "question": question,
                "golds": golds,
                "answer": answer,
                "calls": calls,
                "cost": cost,
                "metrics": {
                    "rr_em": router_r1.exact_match(answer, golds) if answer is not None else 0.0,
                    "rr_f1": router_r1.f1(answer, golds) if answer is not None else 0.0,
                    **all_metrics(answer or "", golds),
                },
            }
        )

    def summary(self, pool: list[str]) -> dict[str, Any]:
        n = len(self.records)
        calls = Counter(c for r in self.records for c in r["calls"])
        total_calls = sum(calls.values())
        return {
            "name": self.name,
            "kind": self.kind,
            "n": n,
            **{m: sum(r["metrics"][m] for r in self.records) / n if n else 0.0 for m in METRICS},
            "no_answer": sum(r["answer"] is None for r in self.records),
            "cost_total": sum(r["cost"] for r in self.records),
            "cost_per_question": sum(r["cost"] for r in self.records) / n if n else 0.0,
            "calls_per_question": total_calls / n if n else 0.0,
            "call_share": {m: calls[m] / total_calls if total_calls else 0.0 for m in pool},
        }


def read_questions(path: str | Path) -> list[dict[str, Any]]:
    """Questions and golds from prompt data (`question`, `label`), Router-R1 records (`query`,
    `ground_truth`) or question/answer JSON lines; errors name the line."""
    out = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}:{i}: not valid JSON: {e.msg}") from None
        question = row.get("question") or row.get("query") if isinstance(row, dict) else None
        gold = next((row[k] for k in ("ground_truth", "answer", "golden_answers", "label") if k in row), None)
        if not isinstance(question, str) or not question.strip():
            raise RecordError(f"{path}:{i}: question: missing (give `question` or `query`)")
        if gold is None:
            raise RecordError(f"{path}:{i}: answer: missing (give `ground_truth`, `answer` or `label`)")
        if isinstance(gold, str) and gold.startswith("["):
            gold = json.loads(gold)  # a prompt-data label holding several golds
        out.append({"question": question.strip(), "golds": as_golds(gold)})
    if not out:
        raise RecordError(f"{path}: no questions")
    return out


def price(pool: RouterConfig, name: str) -> float:
    m = next(m for m in pool.models if m.name == name)
    return m.price_per_1k_prompt + m.price_per_1k_completion


async def run_baselines(
    questions: list[dict[str, Any]], backend: LLMRouterBackend, pool: RouterConfig, seed: int
) -> list[Tally]:
    """Each question asked once, directly, of each pool model (cheapest first), then a random model per
    question and the oracle's pick, both read from those answers."""
    names = [m.name for m in pool.models]
    ranked = sorted(names, key=lambda n: (price(pool, n), names.index(n)))
    answers: dict[str, list[Any]] = {}
    for name in tqdm(ranked, desc="baselines", unit="model"):
        found = await backend.search([f"{name}: {q['question']}" for q in questions], 1)
        answers[name] = [passages[0] for passages in found]
    rng = random.Random(seed)
    right = {
        n: [router_r1.exact_match(p.text, q["golds"]) for p, q in zip(answers[n], questions, strict=True)]
        for n in ranked
    }
    choices = {f"only {n}": [n] * len(questions) for n in ranked}
    choices["random"] = [rng.choice(names) for _ in questions]
    choices["oracle (cheapest right model)"] = [
        next((n for n in ranked if right[n][i]), ranked[0]) for i in range(len(questions))
    ]
    tallies = []
    for label, picks in choices.items():
        tally = Tally(label, "baseline")
        for i, (q, m) in enumerate(zip(questions, picks, strict=True)):
            tally.add(q["question"], q["golds"], answers[m][i].text, [m], answers[m][i].cost)
        tallies.append(tally)
    return tallies


async def run_policy(
    questions: list[dict[str, Any]], args: argparse.Namespace, stage: StageConfig, backend: LLMRouterBackend
) -> Tally:
    if args.engine == "replay":
        if not args.recordings:
            raise ConfigError("--engine replay: needs --recordings FILE.jsonl (question, gen_text_store)")
        base = template_config(args.template or "base").model_copy(
            update={"name": f"replay-{Path(args.recordings).stem}"}
        )
    elif args.model:
        base = resolve_model(args.model, args.template)
    else:
        base = load_model_of(args.config, stage)
    model = effective_model(base, stage)
    tokenizer = load_tokenizer(model) if model.kind == "chat" else None
    protocol = get_protocol(stage.protocol)
    engine = make_engine(args, model, tokenizer, protocol)
    env = SearchEnvironment(backend, stage.episode, protocol=protocol)
    params = GenParams.for_protocol(
        protocol,
        stage.episode.stop_after_answer,
        temperature=args.temperature,
        max_tokens=stage.episode.max_segment_tokens,
    )
    tally = Tally(f"policy ({args.engine}: {model.name})", "policy")
    bar = tqdm(total=len(questions), desc="policy", unit="q")
    try:
        for start in range(0, len(questions), args.batch_size):
            batch = questions[start : start + args.batch_size]
            prompts = [render_prompt(model, q["question"], tokenizer, protocol.PROMPT_END) for q in batch]
            results = await run_episodes(engine, env, prompts, [q["golds"] for q in batch], params)
            for q, prompt, r in zip(batch, prompts, results, strict=True):
                calls = [routed.name for routed, _ in map(backend.route, r.episode.queries) if routed is not None]
                answer = protocol.scored_answer(prompt, r.episode.solution)
                tally.add(q["question"], q["golds"], answer, calls, r.episode.cost)
                tally.records[-1]["trajectory"] = r.episode.solution
            bar.update(len(batch))
    finally:
        bar.close()
        close = getattr(engine, "aclose", None)
        if close is not None:
            await close()
    return tally


def load_model_of(config: str, stage: StageConfig) -> Any:
    from searchrl.stage.config import ModelConfig

    return load(ModelConfig, resolve_model_path(config, stage.model))


def table(summaries: list[dict[str, Any]], pool: list[str]) -> str:
    head = ["policy", "n", *LABELS.values(), "cost / question", "calls / question", *(f"% {m}" for m in pool)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        cells = [
            s["name"],
            str(s["n"]),
            *(f"{s[m]:.3f}" for m in METRICS),
            f"{s['cost_per_question']:.3g}",
            f"{s['calls_per_question']:.2f}",
            *(f"{100 * s['call_share'][m]:.0f}" for m in pool),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summaries: list[dict[str, Any]], metric: str, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for s in summaries:
        marker = "*" if s["kind"] == "policy" else "o"
        ax.scatter(s["cost_per_question"], s[metric], s=160 if marker == "*" else 60, marker=marker)
        ax.annotate(s["name"], (s["cost_per_question"], s[metric]), textcoords="offset points", xytext=(6, 4))
    ax.set_xlabel("cost per question (pool prices)")
    ax.set_ylabel(f"{LABELS[metric]} (mean over questions)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.margins(x=0.25, y=0.15)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


async def evaluate(args: argparse.Namespace, stage: StageConfig, pool: RouterConfig, questions: list[dict[str, Any]]):
    backend = LLMRouterBackend(pool)
    try:
        tallies = [] if args.baselines_only else [await run_policy(questions, args, stage, backend)]
        tallies += await run_baselines(questions, backend, pool, args.seed)
    finally:
        await backend.aclose()
    return tallies


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl eval routing",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    p.add_argument("--config", default="configs/stages/router_r1.yaml", help="the stage config: pool, prompt, episode")
    p.add_argument(
        "--data", required=True, help="test questions: prepare_data output, Router-R1 records, or Q/A JSONL"
    )
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument(
        "--engine", choices=["replay", "openai", "hf", "vllm"], default="replay", help="the policy's engine"
    )
    p.add_argument("--recordings", default=None, help="--engine replay: JSONL of question, gen_text_store")
    p.add_argument("--model", default=None, help="a model config or checkpoint folder (default: the stage's model)")
    p.add_argument("--template", default=None, help="for a checkpoint folder: base, chat or a model config")
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="--engine openai: the policy's endpoint")
    p.add_argument("--served-model", default=None, help="--engine openai: model name at that endpoint")
    pool_src = p.add_mutually_exclusive_group()
    pool_src.add_argument("--loopback", action="store_true", help="serve the pool on loopback (canned answers)")
    pool_src.add_argument("--pool-url", default=None, help="one OpenAI-compatible server for every pool model")
    p.add_argument("--baselines-only", action="store_true", help="skip the policy; run the fixed baselines")
    p.add_argument("--limit", type=int, default=None, help="first N questions")
    p.add_argument("--batch-size", type=int, default=32, help="policy episodes advanced together")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--metric", choices=METRICS, default="rr_em", help="quality axis of the figure (%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="the random baseline's draws")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    started = []
    try:
        stage = load(StageConfig, args.config)
        if stage.search.router is None:
            raise ConfigError(f"{args.config}: search.router: a routing evaluation needs the pool")
        questions = read_questions(args.data)[: args.limit]
        args.out.mkdir(parents=True, exist_ok=True)
        pool = stage.search.router
        if args.loopback:
            qa = [{"question": q["question"], "answer": q["golds"]} for q in questions]
            proc, url = start_loopback(pool, qa, args.out)
            started.append(proc)
            pool = repoint(pool, url)
        elif args.pool_url:
            pool = repoint(pool, args.pool_url)
        t0 = time.monotonic()
        tallies = asyncio.run(evaluate(args, stage, pool, questions))
    except (ConfigError, RecordError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SearchError as e:
        print(f"error: the pool failed: {e}", file=sys.stderr)
        return 3
    finally:
        for proc in started:
            stop(proc)
    names = [m.name for m in pool.models]
    summaries = [t.summary(names) for t in tallies]
    when = time.strftime("%Y-%m-%d")
    result = {
        "config": args.config,
        "data": args.data,
        "n": len(questions),
        "pool": [{"name": m.name, "model": m.model, "price_per_1k": price(pool, m.name)} for m in pool.models],
        "pool_source": "loopback" if args.loopback else args.pool_url or "config",
        "policies": summaries,
        "seconds": round(time.monotonic() - t0, 1),
        "measured": {"date": when, "machine": f"{platform.node()} ({platform.machine()}, {platform.system()})"},
    }
    (args.out / "routing.json").write_text(json.dumps(result, indent=2))
    with (args.out / "records.jsonl").open("w", encoding="utf-8") as fh:
        for t in tallies:
            for r in t.records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    md = table(summaries, names)
    pool_note = "loopback pool (canned answers)" if args.loopback else "pool " + result["pool_source"]
    (args.out / "routing.md").write_text(
        f"Routing evaluation, {len(questions)} questions, {pool_note}, {when}\n\n{md}\n"
    )
    title = f"{Path(args.data).name}: {len(questions)} questions, {pool_note}"
    plot(summaries, args.metric, args.out / "routing.png", title)
    print(md)
    print(f"[routing] wrote {args.out}/routing.json, routing.md, routing.png, records.jsonl", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
