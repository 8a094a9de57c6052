"""The evaluation runner shared by `eval/run_local.py` and `eval/run_bamboogle_online.py`.

Per dataset: episodes in batches through the text-level loop, one JSON line per question appended
as soon as it finishes (so an interrupted run resumes where it stopped), then the judge's pass over
that file when a judge is given, then a summary computed from the file by `eval.score` itself (so
the two always agree), and a Markdown table and a figure across every dataset in the output folder.

A run never reports a figure that is not a result: failed searches make it exit 3 (unless
`--allow-search-errors`), verdicts the judge could not give make it exit 4, and a resume under other
settings is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tqdm import tqdm

from eval.generation import (
    EpisodeResult,
    GenParams,
    HFTextEngine,
    OpenAICompletionsEngine,
    TextEngine,
    VLLMEngine,
    run_episodes,
)
from eval.judge import DEFAULT_CACHE, LLMJudge
from eval.models import resolve_model, template_config, template_id
from eval.replay import ReplayTextEngine
from eval.report import write_reports
from eval.resume import check_resume
from eval.suites import sample, search_r1_question, suite_em
from eval.summary import EXIT_SEARCH_ERRORS, EXIT_UNJUDGED, score_summary
from eval.verdicts import fill_verdicts
from searchrl.config import ConfigError, load, validate
from searchrl.episodes.reader import EPISODES_DIR
from searchrl.episodes.record import EpisodeRecord, label_golds, token_count
from searchrl.episodes.sampler import MIN_WINDOWS, EpisodeSampler
from searchrl.hub import load_causal_lm
from searchrl.hub import load_tokenizer as hub_tokenizer
from searchrl.jsonl import read_jsonl
from searchrl.metrics import all_metrics, as_golds
from searchrl.protocols import DEFAULT_PROTOCOL, PROTOCOL_NAMES, TagProtocol, bind_template, get_protocol
from searchrl.qa_data.questions import dataset_name, load_questions
from searchrl.rollout.environment import SearchEnvironment
from searchrl.search.base import SearchBackend
from searchrl.stage.config import EpisodeConfig, ModelConfig, StageConfig, episode_problem, resolve_model_path
from searchrl.stage.templates import effective_model, load_tokenizer, protocol_model, render_prompt

# Each protocol's evaluation as its authors ran it is its module's EVAL_EPISODE (searchrl/protocols/).
EVAL_EPISODE = get_protocol(DEFAULT_PROTOCOL).EVAL_EPISODE
# Command-line flag -> episode key; the episode keys an evaluation honours.
EPISODE_FLAGS = {
    "top_k": "top_k",
    "max_searches": "max_searches",
    "max_turns": "max_turns",
    "segment_tokens": "max_segment_tokens",
    "max_queries_per_block": "max_queries_per_block",
    "query_separator": "query_separator",
    "observation_tokens": "max_observation_tokens",
}


@dataclass(frozen=True)
class RunSettings:
    """Sampling and batching; the episode (top-k, search cap, ...) is rollout's own EpisodeConfig."""

    temperature: float = 0.0
    batch_size: int = 32
    limit: int | None = None
    sample: int | None = None  # a seeded sample of each dataset instead of all of it
    sample_seed: int = 0


@dataclass
class Run:
    model: ModelConfig
    engine: TextEngine
    search: SearchBackend
    episode: EpisodeConfig
    settings: RunSettings
    out: Path
    engine_name: str = "hf"
    judge: LLMJudge | None = None
    tokenizer: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    allow_search_errors: bool = False
    question_field: str = "question"
    answer_field: str | None = None
    protocol: TagProtocol = field(default_factory=lambda: get_protocol(DEFAULT_PROTOCOL))


def add_generation_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default=None,
        help="a configs/models/*.yaml file, or a Hugging Face checkpoint folder (a stage's output) with --template",
    )
    g.add_argument(
        "--template",
        default=None,
        help="for a checkpoint folder: base, chat, or the model config it was trained from (its prompt)",
    )
    g.add_argument(
        "--stage",
        default=None,
        help="a stage config: evaluate with its episode settings; without --model, its final checkpoint",
    )
    g.add_argument(
        "--engine",
        choices=["auto", "vllm", "openai", "hf", "replay"],
        default="auto",
        help="vllm: offline on the GPU; openai: an OpenAI-compatible /completions endpoint; hf: transformers "
        "(CPU); replay: re-emit recorded trajectories (--recordings), search live; auto (default): replay "
        "with --recordings, else vllm where vLLM and a GPU are, else hf",
    )
    g.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="for --engine openai (e.g. `vllm serve`)")
    g.add_argument("--served-model", default=None, help="model name at the endpoint (default: the model path)")
    g.add_argument("--recordings", default=None, help="for --engine replay: JSONL with question, gen_text_store")
    e = p.add_argument_group("episode (default: the protocol's evaluation as its authors ran it, or the --stage's)")
    e.add_argument(
        "--protocol",
        choices=[name for name in PROTOCOL_NAMES if get_protocol(name).EVAL_EPISODE is not None],
        default=None,
        help="the tag protocol the model speaks: its prompt, tags, answer extraction and evaluation settings "
        f"(default: the --stage's, else {DEFAULT_PROTOCOL})",
    )
    e.add_argument("--top-k", type=int, default=None, help="passages per search (default 5; search-r1: 3)")
    e.add_argument("--max-searches", type=int, default=None, help="searches per question (default 16; search-r1: 4)")
    e.add_argument(
        "--max-turns", type=int, default=None, help="search-r1: turns that may search before the last (default 4)"
    )
    e.add_argument(
        "--observation-tokens",
        type=int,
        default=None,
        help="cut each observation to this many of the policy's tokens (search-r1: 500, its max_obs_length)",
    )
    e.add_argument(
        "--segment-tokens", type=int, default=None, help="tokens per generation segment (default 512; search-r1: 500)"
    )
    e.add_argument("--max-queries-per-block", type=int, default=None, help="multi-query mode: queries per block")
    e.add_argument("--query-separator", default=None, help="multi-query mode: separator (default ||)")
    r = p.add_argument_group("run")
    r.add_argument("--limit", type=int, default=None, help="first N questions of each dataset")
    r.add_argument(
        "--sample",
        type=int,
        default=None,
        help="N questions of each dataset drawn at random with --seed (all of a "
        "smaller one); the reports say the figures are a sample's",
    )
    r.add_argument("--seed", type=int, default=0, help="the seed of --sample (default 0)")
    r.add_argument("--question-field", default="question", help="dataset field of the question (dotted path)")
    r.add_argument(
        "--answer-field", default=None, help="dataset field of the gold answer(s) (default: answer or golden_answers)"
    )
    r.add_argument("--temperature", type=float, default=0.0)
    r.add_argument("--batch-size", type=int, default=32, help="episodes advanced together")
    r.add_argument("--out", type=Path, default=None, help="output folder (default: runs/eval/<model name>)")
    r.add_argument("--force-new", action="store_true", help="move earlier results in --out aside and start again")
    r.add_argument(
        "--allow-search-errors",
        action="store_true",
        help="exit 0 although searches failed (the count is still reported); default: exit 3",
    )
    j = p.add_argument_group("LLM judge (ACC_L)")
    j.add_argument("--judge-url", default=None, help="OpenAI-compatible endpoint of an LLM judge")
    j.add_argument("--judge-model", default="gpt-4o-mini")
    j.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="env var holding the judge's API key")
    j.add_argument("--judge-cache", type=Path, default=DEFAULT_CACHE, help="verdict cache shared by runs (SQLite)")


def protocol_from(args: argparse.Namespace) -> str:
    """--protocol, else the --stage's, else the default; a --stage of another protocol is refused, and so is one
    whose searches are routed to a pool of models (its evaluation is `searchrl eval routing`)."""
    staged = load(StageConfig, args.stage).protocol if args.stage else None
    if args.protocol and staged and args.protocol != staged:
        raise ConfigError(
            f"--protocol {args.protocol}: the --stage {args.stage} speaks {staged}; drop one of the two "
            "(a run speaks one protocol)"
        )
    protocol = args.protocol or staged or DEFAULT_PROTOCOL
    if get_protocol(protocol).EVAL_EPISODE is None:
        raise ConfigError(
            f"--protocol {protocol}: its searches name a pool model; evaluate it with `searchrl eval routing "
            "--config configs/stages/router_r1.yaml`"
        )
    return protocol


def episode_from(args: argparse.Namespace, protocol: str = DEFAULT_PROTOCOL) -> EpisodeConfig:
    """The stage config's episode section when given (else the protocol's evaluation as its authors ran it), then
    flags."""
    data: dict[str, Any] = dict(get_protocol(protocol).EVAL_EPISODE or {})
    if args.stage:
        data = load(StageConfig, args.stage).episode.model_dump(include=set(EPISODE_FLAGS.values()))
    for flag, key in EPISODE_FLAGS.items():
        if getattr(args, flag) is not None:
            data[key] = getattr(args, flag)
    episode = validate(EpisodeConfig, data, "episode settings")
    problem = episode_problem(protocol, episode)
    if problem:
        raise ConfigError(f"--protocol {protocol}: {problem}")
    return episode


def model_from(args: argparse.Namespace, protocol: str = DEFAULT_PROTOCOL) -> ModelConfig:
    """The model config with the prompt the policy was trained with: the --stage's (its own prompt, or its protocol's
    instruction), else the protocol's instruction where it has one (Search-R1's), else the model config's own."""
    model = _model_from(args)
    if args.stage:
        return effective_model(model, load(StageConfig, args.stage))
    speaks = get_protocol(protocol)
    if speaks.PROMPT is None and speaks.PROMPT_END is None:
        raise ConfigError(
            f"--protocol {protocol}: its prompt is its stage config's; give --stage (e.g. "
            f"configs/stages/{protocol.replace('-', '_')}.yaml) instead"
        )
    return protocol_model(model, protocol)


def _model_from(args: argparse.Namespace) -> ModelConfig:
    if args.engine == "replay":
        if not args.recordings:
            raise ConfigError("--engine replay: needs --recordings FILE.jsonl (question, gen_text_store)")
        base = template_config(args.template or "base")
        if base.kind != "base":
            raise ConfigError("--engine replay: needs a base template (recorded trajectories carry no chat template)")
        path = Path(args.recordings)
        return base.model_copy(update={"name": f"replay-{path.stem}", "model_path": str(path.resolve())})
    spec, template = args.model, args.template
    if spec is None:
        if not args.stage:
            raise ConfigError(
                "--model: required: a model config, or a checkpoint folder with --template base|chat (or --stage)"
            )
        stage = load(StageConfig, args.stage)
        spec = stage.openrlhf.get("ckpt.output_dir")
        if not isinstance(spec, str) or not Path(spec).is_dir():
            raise ConfigError(
                f"--stage {args.stage}: its final checkpoint (openrlhf ckpt.output_dir: {spec}) is not there; "
                "train the stage first, or give --model"
            )
        template = template or str(resolve_model_path(args.stage, stage.model))
    return resolve_model(spec, template)


def resolve_engine(args: argparse.Namespace) -> str:
    """The engine `auto` stands for here; a clear error when vLLM is asked for and not installed."""
    import importlib.util

    engine = args.engine
    if engine == "auto":
        if args.recordings:
            return "replay"
        try:
            import torch

            gpu = torch.cuda.is_available()
        except ImportError:
            gpu = False
        engine = "vllm" if gpu and importlib.util.find_spec("vllm") else "hf"
        print(f"[eval] engine: {engine}", file=sys.stderr)
    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            "--engine vllm: vLLM is not installed here (bash launch/install_gpu.sh on a GPU node); "
            "on a CPU use --engine hf, or --engine openai with a served model"
        )
    return engine


def served_model(base_url: str) -> str | None:
    """The one model an OpenAI-compatible server serves (`vllm serve PATH` names it PATH as typed)."""
    import httpx

    try:
        models = httpx.get(base_url.rstrip("/") + "/models", timeout=5.0).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    return models[0]["id"] if isinstance(models, list) and len(models) == 1 and "id" in models[0] else None


def make_engine(
    args: argparse.Namespace, model: ModelConfig, tokenizer: Any, protocol: TagProtocol | None = None
) -> TextEngine:
    protocol = protocol or get_protocol(DEFAULT_PROTOCOL)
    if args.engine == "openai":
        name = args.served_model or served_model(args.base_url) or model.model_path
        return OpenAICompletionsEngine(args.base_url, name)
    if args.engine == "hf":
        return HFTextEngine(load_causal_lm(model.model_path), tokenizer or hub_tokenizer(model.tokenizer))
    if args.engine == "replay":
        return ReplayTextEngine.from_file(
            args.recordings, lambda q: render_prompt(model, q, tokenizer, protocol.PROMPT_END), protocol=protocol
        )
    return VLLMEngine(model.model_path)


def make_judge(args: argparse.Namespace) -> LLMJudge | None:
    if not args.judge_url:
        return None
    return LLMJudge(args.judge_url, args.judge_model, args.judge_cache, api_key_env=args.judge_key_env)


def settings_from(args: argparse.Namespace) -> RunSettings:
    if args.sample is not None and (args.sample < 1 or args.limit is not None):
        raise ValueError("--sample: a positive count, and not together with --limit (which takes the first N)")
    return RunSettings(args.temperature, args.batch_size, args.limit, args.sample, args.seed)


def select(spec: str, settings: RunSettings, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if settings.sample is not None:
        return sample(rows, settings.sample, settings.sample_seed, dataset_name(spec))
    return rows[: settings.limit]


def run_identity(run: Run, args: argparse.Namespace, search_id: dict[str, Any]) -> dict[str, Any]:
    """What the results in an output folder depend on; a resume must match it (eval.resume)."""
    ep = run.episode
    model = args.served_model if args.engine == "openai" and args.served_model else run.model.model_path
    return {
        "model": model,
        "template": template_id(run.model),
        "top_k": ep.top_k,
        "max_searches": ep.max_searches,
        "segment_tokens": ep.max_segment_tokens,
        "max_queries_per_block": ep.max_queries_per_block,
        "query_separator": ep.query_separator if ep.max_queries_per_block > 1 else None,
        "temperature": run.settings.temperature,
        "search": search_id,
        # Only when not the default, so that folders written before protocols existed still resume.
        **(
            {"protocol": run.protocol.NAME, "max_turns": ep.max_turns} if run.protocol.NAME != DEFAULT_PROTOCOL else {}
        ),  # fmt: skip
        # Only when set, so that folders written before sampling existed still resume.
        **({"sample": run.settings.sample, "sample_seed": run.settings.sample_seed} if run.settings.sample else {}),
    }


def _finished(path: Path, redo_failed: bool) -> tuple[set[Any], int]:
    """Question ids already in the output, and how many records were dropped to be redone: a line cut
    off by a crash, and (unless search errors are allowed) a question whose searches failed."""
    if not path.exists():
        return set(), 0
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    good = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if redo_failed and record.get("search_errors"):
            continue
        good.append(record)
    if len(good) != len(lines):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in good), encoding="utf-8")
    return {r["idx"] for r in good}, len(lines) - len(good)


async def evaluate(
    spec: str, run: Run, questions: list[dict[str, Any]] | None = None, population: int | None = None
) -> dict[str, Any]:
    """`population`: how many questions the dataset holds, when `questions` are a sample or a prefix of it."""
    name = dataset_name(spec)
    if questions is None:
        rows = load_questions(spec, run.question_field, run.answer_field)
        questions, population = select(spec, run.settings, rows), len(rows)
    path = run.out / f"{name}.jsonl"
    done, redo = _finished(path, redo_failed=not run.allow_search_errors)
    if redo:
        print(f"[eval] {name}: redoing {redo} questions (cut off, or their searches failed)", file=sys.stderr)
    todo = [q for q in questions if q["idx"] not in done]
    protocol = run.protocol
    env = SearchEnvironment(run.search, run.episode, protocol=protocol)
    # The policy's tokenizer, which episode.max_observation_tokens counts in (an endpoint's: words instead).
    env.tokenizer = getattr(run.engine, "tokenizer", None)
    params = GenParams.for_protocol(
        protocol,
        run.episode.stop_after_answer,
        temperature=run.settings.temperature,
        max_tokens=run.episode.max_segment_tokens,
    )
    started = time.time()
    failed = not_run = 0
    halted = False
    bar = tqdm(total=len(questions), initial=len(questions) - len(todo), desc=name, unit="q")
    # An evaluation is one step: every episode it runs is kept, in one window, for the run viewer.
    kept = EpisodeSampler(run.out / EPISODES_DIR, max(1, len(todo)), max(1, len(todo)), MIN_WINDOWS)
    with path.open("a", encoding="utf-8") as fh, kept:
        for start in range(0, len(todo), run.settings.batch_size):
            batch = todo[start : start + run.settings.batch_size]
            prompts = [render_prompt(run.model, q["question"], run.tokenizer, protocol.PROMPT_END) for q in batch]
            results = await run_episodes(run.engine, env, prompts, [q["answer"] for q in batch], params)
            for q, prompt, r in zip(batch, prompts, results, strict=True):
                failed += r.episode.search_errors
                answered = _answer_record(protocol, q, prompt, r)
                fh.write(json.dumps(answered, ensure_ascii=False) + "\n")
                kept.offer(partial(_episode_record, protocol, answered, r, env.tokenizer))
            fh.flush()
            bar.update(len(batch))
            if failed:
                bar.set_postfix(failed_searches=failed)
            if not run.allow_search_errors and outage(results):
                # Every search of the batch failed: the backend is down, and going on would only make more of
                # the same; what was done is kept, and the same command later goes on from here.
                not_run, halted = len(todo) - start - len(batch), True
                break
    bar.close()
    if run.judge is not None:
        judged = await fill_verdicts(path, run.judge)
        if judged.error:
            print(
                f"[eval] {name}: the judge stopped answering ({judged.error}); {judged.missing} records "
                "without a verdict, kept as generated",
                file=sys.stderr,
            )
    summary = _summary(name, path, run, population or len(questions), halted, not_run)
    summary["seconds_this_run"] = round(time.time() - started, 1)
    (run.out / f"{name}.summary.json").write_text(json.dumps(summary, indent=2))
    write_reports(run.out)
    return summary


def _answer_record(protocol: TagProtocol, q: dict[str, Any], prompt: str, r: EpisodeResult) -> dict[str, Any]:
    """The output line of one question: the episode, the answer read from it and its metrics."""
    pred = protocol.scored_answer(prompt, r.episode.solution)
    record = {
        "idx": q["idx"],
        "question": q["question"],
        "answer": q["answer"],
        "pred_ans": pred or "",
        "has_answer": protocol.policy_answer(r.episode.solution) is not None,
        "gen_text_store": r.episode.solution,
        "searches": r.episode.queries,
        "num_searches": r.episode.num_searches,
        "search_errors": r.episode.search_errors,
        "truncated": r.truncated,
        "metrics": all_metrics(pred or "", as_golds(q["answer"])),
        "judge": None,
        "judge_model": None,
    }
    if protocol.NAME != DEFAULT_PROTOCOL:
        # Its answer may be read from the prompt too (Search-R1's EM reads the whole sequence), so the
        # record keeps what `eval.score` needs to read it again.
        record.update(protocol=protocol.NAME, prompt=prompt, turns=r.episode.turns)
    return record


def _episode_record(
    protocol: TagProtocol, answered: dict[str, Any], r: EpisodeResult, tokenizer: Any
) -> EpisodeRecord:
    """One question's episode as the run viewer reads every run's (searchrl/episodes/record.py): its EM is its
    reward and score, its metrics and search figures its components."""
    ep = r.episode
    metrics = answered["metrics"]
    figures = {"num_searches": ep.num_searches, "search_errors": ep.search_errors, "truncated": r.truncated}
    return EpisodeRecord(
        time=time.time(),
        source="eval",
        protocol=protocol.NAME,
        prompt=ep.prompt,
        solution=ep.solution,
        answer=protocol.policy_answer(ep.solution),
        gold=label_golds(answered["answer"]),
        reward=metrics["em"],
        score=metrics["em"],
        components={**metrics, **{k: float(v) for k, v in figures.items()}},
        queries=list(ep.queries),
        prompt_tokens=token_count(tokenizer, ep.prompt),
        response_tokens=token_count(tokenizer, ep.solution),
        search_seconds=ep.search_seconds,
    )


def _summary(name: str, path: Path, run: Run, population: int, halted: bool, not_run: int) -> dict[str, Any]:
    """A dataset's scores over its whole output file, with the run's settings (the time this run took aside)."""
    summary = {
        "dataset": name,
        **score_summary(path, run.judge.model if run.judge else None),
        "population": population,
        "search_errors_allowed": run.allow_search_errors,
        "halted_on_outage": halted,
        "not_run": not_run,
        "model": run.model.name,
        "model_path": run.model.model_path,
        "template": run.model.kind,
        "engine": run.engine_name,
        "protocol": run.protocol.NAME,
        "settings": {
            "top_k": run.episode.top_k,
            "max_turns": run.episode.max_turns,
            "max_searches": run.episode.max_searches,
            "segment_tokens": run.episode.max_segment_tokens,
            "max_queries_per_block": run.episode.max_queries_per_block,
            "query_separator": run.episode.query_separator,
            "temperature": run.settings.temperature,
            "batch_size": run.settings.batch_size,
            "limit": run.settings.limit,
            "sample": run.settings.sample,
            "sample_seed": run.settings.sample_seed,
        },
        **run.extra,
    }
    if run.extra.get("suite"):
        summary["suite_em"] = suite_em(list(read_jsonl(path)))
    return summary


def outage(results: Sequence[Any]) -> bool:
    """Whether every search of a batch failed (and there was at least one)."""
    searches = sum(r.episode.num_searches for r in results)
    return searches > 0 and sum(r.episode.search_errors for r in results) == searches


def search_failure_line(summaries: Sequence[dict[str, Any]]) -> str | None:
    failed = sum(s["search_errors"] for s in summaries)
    if not failed:
        return None
    where = ", ".join(
        f"{s['dataset']} {s['questions_with_search_errors']}" for s in summaries if s["questions_with_search_errors"]
    )
    questions = sum(s["questions_with_search_errors"] for s in summaries)
    line = f"{failed} searches failed, in {questions} question{'s' * (questions != 1)} ({where})"
    if any(s.get("halted_on_outage") for s in summaries):
        line += "; every search of a batch failed, so the run stopped there"
    return line


def exit_code(summaries: Sequence[dict[str, Any]], allow_search_errors: bool) -> int:
    if search_failure_line(summaries) and not allow_search_errors:
        return EXIT_SEARCH_ERRORS
    if any(s.get("judge_missing") for s in summaries):
        return EXIT_UNJUDGED
    return 0


def report_console(summaries: Sequence[dict[str, Any]], out: Path, allow_search_errors: bool) -> None:
    for s in summaries:
        line = f"{s['dataset']}: n={s['n']} EM={100 * s['em']:.1f} CEM={100 * s['cem']:.1f} F1={100 * s['f1']:.1f}"
        if "acc_l" in s:
            line += f" ACC_L={100 * s['acc_l']:.1f}"
        print(line + f" searches/q={s['mean_searches']:.2f} search errors={s['search_errors']}")
    print(f"results: {out / 'results.md'}, {out / 'results.png'}")
    failures = search_failure_line(summaries)
    if failures and allow_search_errors:
        print(f"warning: {failures}; accepted with --allow-search-errors", file=sys.stderr)
    elif failures:
        print(
            f"error: {failures}: these figures are not results. Fix the search backend and run the same "
            "command again (those questions are redone), or accept them with --allow-search-errors",
            file=sys.stderr,
        )
    missing = [s for s in summaries if s.get("judge_missing")]
    if missing:
        counts = ", ".join(f"{s['dataset']} {s['judge_missing']}" for s in missing)
        print(
            f"error: the judge gave no verdict for {counts} records (generations kept); run the same command "
            f"again, or `searchrl eval judge {out}/<dataset>.jsonl --judge-url ...`",
            file=sys.stderr,
        )


def run_all(
    specs: Sequence[str],
    args: argparse.Namespace,
    search: SearchBackend,
    search_id: dict[str, Any],
    extra: dict[str, Any] | None = None,
    probe: Callable[[], str | None] | None = None,
) -> int:
    """Evaluate every dataset; returns the exit code (0, 3: searches failed, 4: verdicts missing).

    Inputs are checked first (model, episode, datasets, the output folder), then `probe` (one search;
    None when it was answered, else why not), and only then is the model loaded."""
    args.engine = resolve_engine(args)
    protocol_name = protocol_from(args)
    model = model_from(args, protocol_name)
    episode = episode_from(args, protocol_name)
    out = args.out or Path("runs/eval") / model.name
    tokenizer = load_tokenizer(model) if model.kind == "chat" else None
    run = Run(
        model=model,
        engine=None,  # type: ignore[arg-type]  # made below, once the folder is known to be usable
        search=search,
        episode=episode,
        settings=settings_from(args),
        out=out,
        engine_name=args.engine,
        tokenizer=tokenizer,
        extra=extra or {},
        allow_search_errors=args.allow_search_errors,
        question_field=args.question_field,
        answer_field=args.answer_field,
        # The tool-call protocol's tool turn is the policy's chat template's own.
        protocol=bind_template(get_protocol(protocol_name), tokenizer, model.chat_template_kwargs)
        if tokenizer is not None
        else get_protocol(protocol_name),
    )
    loaded = {spec: load_questions(spec, run.question_field, run.answer_field) for spec in specs}
    questions = {spec: select(spec, run.settings, rows) for spec, rows in loaded.items()}
    if run.extra.get("suite") == "search-r1":
        questions = {spec: [{**q, "question": search_r1_question(q["question"])} for q in qs]
                     for spec, qs in questions.items()}  # fmt: skip
    note = check_resume(out, run_identity(run, args, search_id), args.force_new)
    if note:
        print(f"[eval] {note}", file=sys.stderr)
    problem = probe() if probe is not None and not args.allow_search_errors else None
    if problem:
        # Found out before the model loads: otherwise every question would be generated before saying so,
        # and a policy that happens not to search would not say so at all.
        print(
            f"error: searches failed: {problem}. Nothing was evaluated; start the search backend "
            "(searchrl servers start, or searchrl search serve), or pass --allow-search-errors",
            file=sys.stderr,
        )
        return EXIT_SEARCH_ERRORS
    run.engine = make_engine(args, model, tokenizer, run.protocol)
    run.judge = make_judge(args)

    async def go() -> list[dict[str, Any]]:
        try:
            summaries = []
            for spec in specs:
                summaries.append(await evaluate(spec, run, questions[spec], len(loaded[spec])))
                if summaries[-1]["halted_on_outage"]:
                    break
            return summaries
        finally:
            for closable in (run.engine, run.judge, search):
                if closable is not None and hasattr(closable, "aclose"):
                    await closable.aclose()

    summaries = asyncio.run(go())
    report_console(summaries, out, args.allow_search_errors)
    return exit_code(summaries, args.allow_search_errors)
