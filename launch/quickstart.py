"""Quickstart on embedded defaults: real episodes through OpenRLHF's own agent executor.

CPU mode (the default without a GPU stack): builds the embedded index over the bundled mini corpus
with the bundled MiniLM, starts the retrieval and reward servers on loopback, then runs episodes of
stage 1 through `stage1_format/agent_func.py` with
  (b) a replay policy that re-emits the recorded actions of R1-Searcher's released trajectories
      while search and reward run live, and
  (a) a tiny random transformer built from a config (real generation, meaningless text).
Real mode (`--real`, or automatically on a GPU node with vLLM and Ray installed): builds the index,
starts the servers, prepares the stage-1 data and submits stage 1 with launch/ray_submit.sh.

`key=value` overrides reach both modes. The CPU demo honours `episode.*` (multi-query, process reward,
...) and `reward.*` (the reward server's spec too); the rest (`openrlhf.*`, server URLs, the model)
only mean something to a real job, so the demo refuses them rather than run without them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from searchrl.rehearsal.inputs import REHEARSAL_DIR, rehearsal_index
from searchrl.search.index.build import build
from searchrl.tiny_policy.model import build_model, build_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from searchrl.config import ConfigError, parse_overrides  # noqa: E402
from searchrl.jsonl import read_jsonl  # noqa: E402
from searchrl.paths import CONFIGS, EXAMPLES, ROOT, RUNS  # noqa: E402
from searchrl.process import exit_on_sigterm, free_port, start_module, stop  # noqa: E402
from searchrl.protocols import DEFAULT_PROTOCOL, get_protocol  # noqa: E402
from searchrl.rehearsal.ray_head import RayHead  # noqa: E402
from searchrl.rollout.agent import Runtime, load_agent_executor  # noqa: E402
from searchrl.rollout.engines import HFEngine, ReplayEngine, SamplingParams  # noqa: E402
from searchrl.stage.config import ModelConfig, StageConfig, load_stage  # noqa: E402
from searchrl.stage.templates import render_prompt  # noqa: E402

STAGE1 = CONFIGS / "stages/stage1_format.yaml"
# The stages' lengths in the quickstart, short enough for six minutes end to end on 2 cores: in the learning
# benchmark stage 1's training batches searched well-formed in 0.78-0.83 of episodes by step 4, and stage 2's EM
# on them was 0.91-0.95 by step 3, on every seed (docs/REHEARSAL.md, "What the tiny policy learns").
QUICKSTART_STAGE1_STEPS = 4
QUICKSTART_STAGE2_STEPS = 3
MINI_CORPUS = EXAMPLES / "mini_corpus.jsonl"


def gpu_stack() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and all(importlib.util.find_spec(m) for m in ("vllm", "ray", "deepspeed"))
    except ImportError:
        return False


def build_mini_index(out: Path, device: str = "cpu") -> Path:

    index = out / "index"
    print(f"[quickstart] index: {MINI_CORPUS} -> {index} (bundled all-MiniLM-L6-v2, {device})")
    build(MINI_CORPUS, "jsonl", index, device=device)
    return index


def shared_rehearsal_index() -> Path:
    """The index every CPU rehearsal trains on (the mini corpus and the fictional training people), built once."""
    print(f"[quickstart] index: {MINI_CORPUS} + the training people of {EXAMPLES / 'fictional/corpus.jsonl'} -> "
          f"{REHEARSAL_DIR / 'index'} (bundled all-MiniLM-L6-v2, cpu; built once)")  # fmt: skip
    return rehearsal_index()


def plot_learning(curves: dict[str, dict[int, dict[str, float]]], path: Path) -> None:
    """One PNG of both lessons: stage 1's format-and-search rate, then stage 2's EM, per rollout step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    offset = 0
    for stage, key, label in (("stage1", "score", "stage 1: format-and-search rate"), ("stage2", "em", "stage 2: EM")):
        steps = sorted(curves.get(stage, {}))
        ax.plot([offset + s for s in steps], [curves[stage][s].get(key, 0) for s in steps], "o-", label=label)
        offset += len(steps)
    ax.set_xlabel("rollout step (OpenRLHF train_ppo_ray, tiny policy, CPU)")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def train_stages(
    out: Path, steps1: int, steps2: int, options: list[str], head: RayHead | None = None, search_url: str | None = None
) -> dict[str, Any]:
    """The tiny policy learning stage 1, then stage 2 from stage 1's checkpoint, through OpenRLHF's own
    train_ppo_ray on CPU (`ray job submit`, one job per stage, both on `head` and `search_url` when given)."""
    from searchrl.rehearsal.training import step_table, train

    results: dict[str, Any] = {}
    curves: dict[str, dict[int, dict[str, float]]] = {}
    for stage, steps, lesson in (("stage1", steps1, "follow the protocol and search"),
                                 ("stage2", steps2, "answer with what the documents say")):  # fmt: skip
        if steps <= 0:
            continue
        print(f"\n[quickstart] training: {stage} for {steps} steps ({lesson}), OpenRLHF's train_ppo_ray on CPU "
              "through `ray job submit`", flush=True)  # fmt: skip
        result = train(stage, None, options, steps, resume=False, out=out / "train", head=head, search_url=search_url)
        curves[stage] = {int(k): v for k, v in result.pop("curves").items()}
        print(step_table(curves[stage]), flush=True)
        results[stage] = result
    plot_learning(curves, out / "learning.png")
    print(f"[quickstart] curves: {out / 'learning.png'}; TensorBoard: {out / 'train'}/*/tensorboard")
    return results


async def run_episodes(stage, jobs: list[dict[str, Any]], tokenizer, max_length: int) -> list[dict[str, Any]]:
    runtime = Runtime.from_stage(stage)
    Runtime.install(runtime)
    executor = load_agent_executor(ROOT / "stage1_format/agent_func.py")
    try:

        async def one(job: dict[str, Any]) -> dict[str, Any]:
            params = SamplingParams(temperature=job.get("temperature", 0.0), max_tokens=None, seed=0)
            t0 = time.perf_counter()
            result = await executor.execute(job["prompt"], job["label"], params, max_length, tokenizer, job["engine"])
            text = tokenizer.decode(result["observation_tokens"])[len(job["prompt"]) :]
            parsed = get_protocol(DEFAULT_PROTOCOL).parse_solution(text)
            logs = {k: float(v) for k, v in result["extra_logs"].items()}
            return {
                "mode": job["mode"],
                "question": job["question"],
                "gold": job["label"],
                "answer": parsed.answer,
                "queries": parsed.queries,
                "recorded_queries": job.get("recorded_queries"),
                "reward": float(result["reward"]),
                "score": float(result["scores"]),
                "segments": len(result["action_ranges"]),
                "seconds": round(time.perf_counter() - t0, 3),
                "logs": logs,
                "solution": text,
            }

        return await asyncio.gather(*(one(j) for j in jobs))
    finally:
        Runtime.install(None)
        await runtime.rewards.aclose()
        await runtime.environment.search.aclose()


# Override sections the CPU demo applies; everything else is for a real job only.
CPU_SECTIONS = ("episode.", "reward.")


def cpu_overrides(overrides: list[str]) -> list[str]:
    """The overrides the CPU demo honours, checked against the stage config; a ConfigError names any other."""
    parse_overrides(overrides)
    refused = [o for o in overrides if not o.strip().startswith(CPU_SECTIONS)]
    if refused:
        raise ConfigError(
            f"the CPU demo cannot honour {', '.join(refused)}: it applies episode.* and reward.* overrides "
            "(e.g. episode.max_queries_per_block=3, reward.process_weight=0.5); the others only mean "
            "something to the real job (--real, on a GPU node)"
        )
    load_stage(STAGE1, overrides)
    return list(overrides)


def cpu_demo(args: argparse.Namespace) -> int:

    out: Path = args.out
    try:
        options = cpu_overrides(args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if options:
        print(f"[quickstart] options: {' '.join(options)}")
    index = shared_rehearsal_index()
    search_port, reward_port = free_port(), free_port()
    print(f"[quickstart] retrieval server on 127.0.0.1:{search_port}, reward server on 127.0.0.1:{reward_port}")
    search = start_module("search_backend.serve", ["--index", str(index)], search_port, out / "retrieval.log", 180)
    # Both training stages use this retrieval server and one Ray head, started now so it comes up while the
    # episodes run: the head's and the encoder's start-up are paid once, not once a stage.
    head = None
    if args.train_steps > 0:
        (out / "train").mkdir(parents=True, exist_ok=True)
        head = RayHead(out / "train", num_cpus=4, num_gpus=1)
    try:
        return _demo(args, out, options, search_port, reward_port, head)
    finally:
        stop(search)
        if head is not None:
            head.stop()


def _demo(
    args: argparse.Namespace, out: Path, options: list[str], search_port: int, reward_port: int, head: RayHead | None
) -> int:
    stage, results = _run_demo_episodes(args, out, options, search_port, reward_port)
    with (out / "episodes.jsonl").open("w", encoding="utf-8") as fh:
        for r in results:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    print()
    print(f"{'mode':<17}{'question':<46}{'searches':>8}{'reward':>8}{'EM':>5}  answer")
    for r in results:
        answer = (r["answer"] or "(none)")[:28]
        print(
            f"{r['mode']:<17}{r['question'][:44]:<46}{len(r['queries']):>8}{r['reward']:>8.2f}"
            f"{r['logs'].get('em', 0):>5.0f}  {answer}"
        )
    summary = _demo_summary(results, options, stage, out)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(
        f"\n[quickstart] mode: CPU demo (no GPU stack). Replay: {summary['replay']['episodes']} episodes of "
        f"R1-Searcher's released trajectories re-emitted with live search and reward, mean stage-1 reward "
        f"{summary['replay']['mean_reward']:.3f}; tiny transformer: {summary['tiny_transformer']['episodes']} "
        f"episodes of random text. Episodes: {out / 'episodes.jsonl'}"
    )
    if summary["replay"]["search_errors"]:
        return 1
    if args.train_steps > 0:  # stage 2 starts from stage 1's checkpoint: no stage 1, no training
        try:
            trained = train_stages(
                out, args.train_steps, args.stage2_steps, options, head, f"http://127.0.0.1:{search_port}"
            )
        except (ConfigError, RuntimeError, TimeoutError, ValueError) as e:
            print(f"error: training: {e}", file=sys.stderr)
            return 1
        summary["training"] = trained
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        for stage, t in trained.items():
            print(stage_line(stage, t))
    return 0


def _run_demo_episodes(
    args: argparse.Namespace, out: Path, options: list[str], search_port: int, reward_port: int
) -> tuple[StageConfig, list[dict[str, Any]]]:
    """Stage-1 episodes of both demo policies, scored by a reward server that runs only while they do."""
    reward = start_module(
        "reward_server",
        ["--config", str(STAGE1), "--log-jsonl", str(out / "scored.jsonl")]
        + [o for o in options if o.startswith("reward.")],
        reward_port,
        out / "reward.log",
    )
    try:
        stage, model_cfg = load_stage(
            STAGE1,
            [
                f"search.urls=http://127.0.0.1:{search_port}",
                f"reward_server.urls=http://127.0.0.1:{reward_port}",
                f"episode.max_segment_tokens={args.segment_tokens}",
                *options,
            ],
        )
        records = list(read_jsonl(EXAMPLES / "bamboogle_llama_sample.jsonl"))[: args.episodes]
        tokenizer, jobs = _demo_jobs(records, model_cfg, args.tiny_episodes)
        print(
            f"[quickstart] running {len(jobs)} episodes through OpenRLHF's MultiTurnAgentExecutor "
            f"(stage1_format/agent_func.py)"
        )
        return stage, asyncio.run(run_episodes(stage, jobs, tokenizer, args.max_length))
    finally:
        stop(reward)


def _demo_jobs(
    records: list[dict[str, Any]], model_cfg: ModelConfig, tiny_episodes: int
) -> tuple[Any, list[dict[str, Any]]]:
    """The tokenizer both policies share and one job per episode: every record replayed, then the first
    `tiny_episodes` of them generated by the tiny transformer."""
    corpus = [r["text"] for r in read_jsonl(EXAMPLES / "mini_corpus.jsonl")]
    tokenizer = build_tokenizer([r["gen_text_store"] for r in records] + [r["question"] for r in records] + corpus)
    prompts = {r["question"]: render_prompt(model_cfg, r["question"]) for r in records}
    replay = ReplayEngine(tokenizer, {prompts[r["question"]]: r["gen_text_store"] for r in records})
    jobs = [
        {
            "mode": "replay",
            "question": r["question"],
            "label": r["answer"],
            "prompt": prompts[r["question"]],
            "engine": replay,
            "recorded_queries": get_protocol(DEFAULT_PROTOCOL).parse_solution(r["gen_text_store"]).queries,
        }
        for r in records
    ]
    tiny = HFEngine(build_model(len(tokenizer)), tokenizer)
    jobs += [
        {
            "mode": "tiny-transformer",
            "question": r["question"],
            "label": r["answer"],
            "prompt": prompts[r["question"]],
            "engine": tiny,
            "temperature": 1.0,
        }
        for r in records[:tiny_episodes]
    ]
    return tokenizer, jobs


def _demo_summary(results: list[dict[str, Any]], options: list[str], stage: StageConfig, out: Path) -> dict[str, Any]:
    replays = [r for r in results if r["mode"] == "replay"]
    return {
        "mode": "cpu-demo",
        "overrides": options,
        "episode": stage.episode.model_dump(),
        "reward": stage.reward.model_dump(),
        "episodes": len(results),
        "replay": {
            "episodes": len(replays),
            "mean_reward": sum(r["reward"] for r in replays) / max(1, len(replays)),
            "searches": sum(len(r["queries"]) for r in replays),
            "search_errors": sum(r["logs"].get("search_errors", 0) for r in replays),
            "queries_as_recorded": sum(r["queries"] == r["recorded_queries"] for r in replays),
            "em": sum(r["logs"].get("em", 0) for r in replays) / max(1, len(replays)),
        },
        "tiny_transformer": {"episodes": len(results) - len(replays)},
        "out": str(out / "episodes.jsonl"),
    }


def stage_line(stage: str, t: dict[str, Any]) -> str:
    """A trained stage in one line: its own measure, then what the reward server scored (the reward the policy is
    paid, and the share of episodes that broke no format rule: stage 2 pays a broken rule with a penalty, so its
    reward can fall while EM rises)."""

    def change(key: str) -> str:
        first, last = t.get(f"{key}_first"), t.get(f"{key}_last")
        return "n/a" if first is None or last is None else f"{first:.2f} -> {last:.2f}"

    what = "format-and-search rate" if stage == "stage1" else "EM"
    return (
        f"[quickstart] {stage}: {what} {change('score')}; reward server: mean reward {change('server_reward')}, "
        f"format kept {change('server_format_ok')}; first to last of {t['steps']} steps ({t['seconds']:.0f} s)"
    )


def real_job(args: argparse.Namespace) -> int:
    out: Path = args.out
    index = build_mini_index(out, device="cuda")
    data = RUNS / "data/stage1_format.jsonl"
    steps = [
        ["bash", str(ROOT / "launch/start_servers.sh"), "--index", str(index), "--stage", "stage1"],
        [
            sys.executable,
            "-m",
            "stage1_format.prepare_data",
            "--input",
            str(EXAMPLES / "stage_1.jsonl"),
            "--out",
            str(data),
        ],
        ["bash", str(ROOT / "launch/ray_submit.sh"), "stage1", *args.overrides],
    ]
    print("[quickstart] mode: REAL stage-1 job (GPU stack found)")
    for cmd in steps:
        print("[quickstart] $", " ".join(cmd))
        code = subprocess.run(cmd, cwd=ROOT).returncode
        if code != 0:
            return code
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="searchrl quickstart", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RUNS / "quickstart", help="folder for the index, logs, episodes")
    p.add_argument("--episodes", type=int, default=12, help="replayed trajectories (at most 24 bundled)")
    p.add_argument("--tiny-episodes", type=int, default=2, help="episodes of the tiny random transformer")
    p.add_argument(
        "--segment-tokens", type=int, default=512, help="per-segment token cap (episode.max_segment_tokens)"
    )
    p.add_argument("--max-length", type=int, default=8192, help="prompt + response token budget")
    p.add_argument(
        "--train-steps",
        type=int,
        default=QUICKSTART_STAGE1_STEPS,
        help="then train the tiny policy on stage 1 for this many steps (OpenRLHF on CPU); 0 skips training",
    )
    p.add_argument(
        "--stage2-steps",
        type=int,
        default=QUICKSTART_STAGE2_STEPS,
        help="then stage 2 from stage 1's checkpoint for this many steps; 0 skips stage 2",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true", help="submit the real stage-1 job (GPU node, `train` extra)")
    mode.add_argument("--cpu", action="store_true", help="the CPU demo even where a GPU stack is installed")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="stage overrides: --real passes them to ray_submit.sh; the CPU demo honours episode.* and reward.*",
    )
    args = p.parse_intermixed_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.real or (not args.cpu and gpu_stack()):
        if not gpu_stack():
            print(
                "error: --real needs a GPU with vLLM, Ray and DeepSpeed: bash launch/install_gpu.sh", file=sys.stderr
            )
            return 2
        return real_job(args)
    exit_on_sigterm()  # a stopped quickstart stops its Ray head and servers instead of leaving them running
    return cpu_demo(args)


if __name__ == "__main__":
    sys.exit(main())
