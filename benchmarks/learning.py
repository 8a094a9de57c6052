"""Learning, measured: the tiny policy's warm start, then stage 1, then stage 2 from stage 1's checkpoint,
each through `searchrl stage rehearse STAGE --train` (OpenRLHF's own train_ppo_ray on CPU), per seed, with
an lr = 0 control of each stage and an independent evaluation of every checkpoint.

    python -m benchmarks.learning --stages stage1,stage2 --seeds 3 --out DIR
        [--steps1 12] [--steps2 20] [--lr 3e-4] [--eval-samples 2] [--options grpo,dynamic,process,efficiency]
        [--first-seed K] [--protocol search-r1]
    python -m benchmarks.learning --merge DIR [DIR ...] --out DIR   # one report from several runs' seeds

The independent evaluation runs each checkpoint outside the training loop (Hugging Face `generate`, not the
training rehearsal's vLLM stand-in) on questions training never saw (the last 100 stage-1 questions; the 100
held-out fictional people), appends documents with the environment step against the retrieval server and
scores each episode with the stage's reward server, twice: sampled as training samples (temperature 1.0, top-p
0.95, two samples a question) and greedy, as `searchrl eval local` decodes. The stage-2 targets are checked on both.

`--protocol search-r1` runs the same two stages in Search-R1's tags (PROTOCOL_FLAGS: its protocol, the stage's
reward reading it, its two-turn limit) from the warm start written in them (examples/tiny_policy_search_r1/).

Writes DIR/learning.json (per seed and step: mean reward, format-and-search rate, EM, searches per
episode, response length, step time split into generation / training / weight sync; the evaluations;
the controls; the prompt template), DIR/learning.png, the TensorBoard events of OpenRLHF's own logger
(DIR/seedK/*/tensorboard) and, for seed 0, the Hugging Face folders DIR/seed0/stage1/{warm_start,final}
and DIR/seed0/stage2/{start,final}.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from eval.generation import GenParams, HFTextEngine, run_episodes  # noqa: E402
from searchrl.config import load  # noqa: E402
from searchrl.paths import EXAMPLES, ROOT  # noqa: E402
from searchrl.process import exit_on_sigterm, free_port, start_module, stop  # noqa: E402
from searchrl.protocols import get_protocol  # noqa: E402
from searchrl.rehearsal import training as train_rehearsal  # noqa: E402
from searchrl.rehearsal.inputs import EVERYONE, TRAINING_SPLITS, rehearsal_index  # noqa: E402
from searchrl.rehearsal.ray_head import open_head  # noqa: E402
from searchrl.rehearsal.warm_start import SPEAKERS, base_template, content_sha256  # noqa: E402
from searchrl.rehearsal.warm_start import ensure as ensure_warm_start  # noqa: E402
from searchrl.rollout.environment import SearchEnvironment  # noqa: E402
from searchrl.rollout.reward_client import RewardClient  # noqa: E402
from searchrl.search.http_client import HttpSearchBackend  # noqa: E402
from searchrl.stage.config import EpisodeConfig, ModelConfig, load_stage  # noqa: E402
from searchrl.stage.templates import effective_model  # noqa: E402
from searchrl.tiny_policy.build import fictional_people  # noqa: E402
from searchrl.tiny_policy.mixture import HELDOUT_STAGE1  # noqa: E402
from searchrl.tiny_policy.probe import probe  # noqa: E402
from searchrl.tiny_policy.writing import WRITINGS  # noqa: E402

STAGE_FILES = {"stage1": "stage1_format", "stage2": "stage2_answer"}
# Each stage's overrides in a protocol: the stage speaks it, its reward reads it, and Search-R1's turn limit (its
# training scripts' 2) ends the episodes that its invalid-action answer would otherwise let run on.
PROTOCOL_FLAGS: dict[str, list[str]] = {
    "r1-searcher": [],
    "search-r1": ["protocol=search-r1", "reward.protocol=search-r1", "episode.max_turns=2", "episode.max_searches=2"],
}
# The stage-1 end the issue asks of each protocol's runs (R1-Searcher's: issue 49; Search-R1's: issue 48).
STAGE1_FINAL = {"r1-searcher": 0.8, "search-r1": 0.6}
# Stage 2's sampled held-out EM the issue asks of the seeds' mean (issue 49); CI asks it of a run that stage 1 left
# too high to gain 0.2.
STAGE2_EM = 0.8
# CI's learning check (ci_check), chosen on the development split (benchmarks/results/learning_ci_check.json: CI's
# settings, seed 0, trained beside its lr = 0 control): stage 1's format-and-search rate must rise by CI_STAGE1_GAIN
# over the warm start (dev: +0.33 trained, -0.01 at lr = 0); stage 2's EM by 0.2 (dev: +0.69, control +0.00), or,
# where stage 1 left it too high to gain that, reach STAGE2_EM and still rise by CI_STAGE2_MIN_GAIN, which an lr = 0
# run (same weights) does not; with another person's documents shown, the answer follows them in CI_READING of the
# episodes (dev: 0.99, control 0.23).
CI_STAGE1_GAIN = 0.15
CI_STAGE2_GAIN = 0.2
CI_STAGE2_MIN_GAIN = 0.05
CI_READING = 0.5
# The per-step figures kept from OpenRLHF's own logs, under the names this report uses.
STEP_KEYS = {
    "reward": "reward",
    "score": "score",
    "em": "em",
    "num_searches": "searches_per_episode",
    "response_length": "response_length",
    "timing/generation": "generation_s",
    "timing/ppo_train": "training_s",
    "timing/broadcast": "weight_sync_s",
    "timing/make_experience": "make_experience_s",
    "dynamic_filtering_pass_rate": "filter_pass_rate",
}
# Stage-2 variants run beside the default from the same stage-1 checkpoint.
OPTIONS = {
    "process": ["reward.process_weight=0.2"],
    "efficiency": ["reward.efficiency_weight=0.2"],
    "grpo": ["algorithm=grpo"],
    # OpenRLHF's filter drops groups whose mean score is 0 or 1; the rehearsal gives it a pool of prompts to draw
    # replacements from (searchrl/rehearsal/training.py), so its step count follows the filter's pass rate.
    "dynamic": ["openrlhf.algo.dynamic_filtering_enable=true"],
}


# The evaluation splits. Development questions are what any step count, rate or CI bound is chosen on; the held-out
# ones are read by the committed report alone. Stage 1's: 100 real questions nothing trains on (dev: R1-Searcher's
# stage-2 questions, examples/stage_1_dev.jsonl; held out: the last 100 of stage_1.jsonl); stage 2's: the fictional
# people of that split.
SPLITS = ("dev", "heldout")


def questions(stage: str, split: str = "dev") -> list[dict[str, Any]]:
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: one of {', '.join(SPLITS)}")
    if stage == "stage1" and split == "heldout":
        rows = [json.loads(line) for line in (EXAMPLES / "stage_1.jsonl").open(encoding="utf-8")][-HELDOUT_STAGE1:]
    else:
        file = EXAMPLES / ("stage_1_dev.jsonl" if stage == "stage1" else f"fictional/{split}.jsonl")
        rows = [json.loads(line) for line in file.open(encoding="utf-8")]
    return [{"question": r["question"], "answer": r["answer"]} for r in rows]


class Servers:
    """Retrieval servers on the rehearsal indexes (the training people's for the training runs, every split's for
    the evaluations), a reward server per stage for the evaluations, and the Ray head the training runs share."""

    def __init__(self, work: Path, parallel: int = 2) -> None:
        self.work = work
        self.procs: list[Any] = []
        urls = []
        for splits, log in ((TRAINING_SPLITS, "ret.log"), (EVERYONE, "ret-eval.log")):
            port = free_port()
            serve = ["--index", str(rehearsal_index(splits=splits))]
            self.procs.append(start_module("search_backend.serve", serve, port, work / log, 300))
            urls.append(f"http://127.0.0.1:{port}")
        self.search_url, self.eval_search_url = urls
        self.reward_urls: dict[str, str] = {}
        # One Ray head for every training run: its start-up is paid once, not once a run. A logical GPU for each
        # run that trains side by side: a stage's run, its lr = 0 control and the stage-2 options.
        self.head = open_head(work, num_cpus=4 * parallel, num_gpus=parallel)

    def reward_url(self, stage: str, overrides: list[str]) -> str:
        key = f"{stage}:{','.join(overrides)}"
        if key not in self.reward_urls:
            cfg, _ = load_stage(ROOT / "configs/stages" / f"{STAGE_FILES[stage]}.yaml", overrides)
            spec = self.work / f"{stage}-{len(self.reward_urls)}.json"
            spec.write_text(cfg.model_dump_json(), encoding="utf-8")
            port = free_port()
            self.procs.append(start_module("reward_server", ["--resolved", str(spec)], port, self.work / "rew.log"))
            self.reward_urls[key] = f"http://127.0.0.1:{port}"
        return self.reward_urls[key]

    def close(self) -> None:
        self.head.stop()
        for p in self.procs:
            stop(p)


async def _evaluate(
    checkpoint: Path,
    stage: str,
    servers: Servers,
    samples: int,
    seed: int,
    overrides: list[str],
    temperature: float,
    split: str = "dev",
) -> dict[str, Any]:
    cfg, _ = load_stage(ROOT / "configs/stages" / f"{STAGE_FILES[stage]}.yaml", overrides)
    model = effective_model(load(ModelConfig, ROOT / cfg.model), cfg)
    rows = [r for r in questions(stage, split) for _ in range(samples)]
    prompts = [model.template.replace("{question}", r["question"]) for r in rows]  # type: ignore[union-attr]
    labels = [r["answer"] for r in rows]
    engine = HFTextEngine.from_pretrained(str(checkpoint), batch_size=32)
    search = HttpSearchBackend([servers.eval_search_url])
    protocol = get_protocol(cfg.protocol)
    env = SearchEnvironment(search, EpisodeConfig(**cfg.episode.model_dump()), protocol=protocol)
    env.tokenizer = engine.tokenizer
    rewards = RewardClient([servers.reward_url(stage, overrides)], deadline_s=120)
    top_p = 0.95 if temperature > 0 else 1.0
    params = GenParams.for_protocol(
        protocol, cfg.episode.stop_after_answer, temperature=temperature, top_p=top_p,
        max_tokens=cfg.episode.max_segment_tokens, seed=seed,
    )  # fmt: skip
    try:
        results = await run_episodes(engine, env, prompts, labels, params)
        scored = await asyncio.gather(
            *(
                rewards.score(
                    r.episode.prompt + r.episode.solution, r.episode.prompt, r.episode.label, r.episode.metadata()
                )
                for r in results
            )  # fmt: skip
        )
    finally:
        await search.aclose()
        await rewards.aclose()
    tok = engine.tokenizer
    lengths = [len(tok(r.episode.solution, add_special_tokens=False)["input_ids"]) for r in results]
    mean = statistics.fmean
    return {
        "checkpoint": str(checkpoint),
        "episodes": len(results),
        "reward": mean(s.reward for s in scored),
        "score": mean(s.score for s in scored),
        "em": mean(s.extra_logs.get("em", 0.0) for s in scored),
        "format_ok": mean(s.extra_logs.get("format_ok", 0.0) for s in scored),
        "searches_per_episode": mean(r.episode.num_searches for r in results),
        "response_length": mean(lengths),
        "search_errors": sum(r.episode.search_errors for r in results),
        "example": results[0].episode.solution[:600],
    }


@functools.cache
def copying(checkpoint: Path, samples: int, seed: int, protocol: str, split: str = "dev") -> dict[str, Any]:
    """The copy probe on the split's people (searchrl/tiny_policy/probe.py): does the query name the person,
    does the answer follow the documents, and does it follow another person's documents swapped in. Once per
    checkpoint: stage 1's final checkpoint is also stage 2's start."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    people, writing = fictional_people(split), WRITINGS[protocol]
    return probe(model, tokenizer, base_template(protocol), people, samples=samples, seed=seed, writing=writing)


def evaluate(
    checkpoint: Path,
    stage: str,
    servers: Servers,
    samples: int,
    seed: int,
    overrides: list[str],
    greedy: bool = True,
    split: str = "dev",
) -> dict:
    t0 = time.monotonic()
    out = asyncio.run(_evaluate(checkpoint, stage, servers, samples, seed, overrides, 1.0, split))
    if greedy:
        # Greedy decoding answers each question once: one sample a question, the mode of the policy.
        mode = asyncio.run(_evaluate(checkpoint, stage, servers, 1, seed, overrides, 0.0, split))
        out["greedy"] = {k: mode[k] for k in GREEDY_KEYS}
    protocol = load_stage(ROOT / "configs/stages" / f"{STAGE_FILES[stage]}.yaml", overrides)[0].protocol
    out["copy"] = copying(checkpoint, samples, seed, protocol, split)
    out["seconds"] = round(time.monotonic() - t0, 1)
    c = out["copy"]
    shown = f" (greedy {out['greedy']['em']:.3f})" if greedy else ""
    print(f"[eval] {stage} {checkpoint}: score {out['score']:.3f} reward {out['reward']:.3f} "
          f"em {out['em']:.3f}{shown} searches {out['searches_per_episode']:.2f} | query "
          f"names the person "
          f"{c['names_rate']:.2f}, answer = documents' city {c['doc_city']:.2f}, with another's documents "
          f"{c['swapped_shown_city']:.2f}", flush=True)  # fmt: skip
    return out


def steps_of(curves: dict[str, dict[str, float]]) -> list[dict[str, float]]:
    return [{"step": int(k), **{v: c[t] for t, v in STEP_KEYS.items() if t in c}} for k, c in curves.items()]


def run_stage(
    stage: str, steps: int, out: Path, lr: float, seed: int, pretrain: Path | None, extra: list[str], shared: Servers
) -> dict:
    """`shared`: the Servers whose retrieval server and Ray head every run uses."""
    print(f"[learning] seed {seed}: {stage} for {steps} steps, lr {lr}, into {out}", flush=True)
    result = train_rehearsal.train(
        stage, None, extra, steps, resume=False, out=out, pretrain=pretrain, lr=lr, seed=seed,
        head=shared.head, search_url=shared.search_url, label=f"{out.name} {stage}",
    )  # fmt: skip
    result["steps_log"] = steps_of(result.pop("curves"))
    return result


def side_by_side(*runs: Callable[[], dict]) -> list[dict]:
    """Runs a stage's training and its control at once on the shared head. On 2 cores one job leaves part of a
    core idle (its DeepSpeed update is Python-bound), so a pair of 30-step stage-2 runs took 1.5x one run's time,
    not 2x. Results in the order given."""
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        return [f.result() for f in [pool.submit(run) for run in runs]]


def copy_model(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def commit() -> dict[str, Any]:
    """The checkout a run measured: HEAD and whether tracked files differed from it (None outside a git checkout)."""
    import subprocess

    def git(*args: str) -> str | None:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no")
    return {"head": head, "dirty": bool(changed) if changed is not None else None}


def warm_start_record(protocol: str) -> dict[str, Any]:
    """The warm start a run started from: its folder, the inputs hash its build recorded, and a hash of its content
    (the weights and tokenizer files as they are on disk)."""
    folder = SPEAKERS[protocol].shipped
    build = folder / "build.json"
    inputs = json.loads(build.read_text(encoding="utf-8")).get("inputs_hash") if build.is_file() else None
    return {"folder": str(folder.relative_to(ROOT)), "inputs_hash": inputs, "content_sha256": content_sha256(folder)}


def fictional_world() -> dict[str, Any]:
    """How the fictional people were drawn and dealt into splits (examples/fictional/world.json: both seeds)."""
    return json.loads((EXAMPLES / "fictional/world.json").read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=__doc__.splitlines()[0])
    p.add_argument("--stages", default="stage1,stage2", help="stage1, or stage1,stage2")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps1", type=int, default=12, help="stage-1 rollout steps")
    p.add_argument("--steps2", type=int, default=20, help="stage-2 rollout steps")
    p.add_argument("--lr", type=float, default=train_rehearsal.DEFAULT_LR)
    p.add_argument("--eval-samples", type=int, default=2, help="samples per evaluation question (100 questions)")
    p.add_argument(
        "--split",
        choices=SPLITS,
        default="dev",
        help="the questions evaluated: dev (tuning, CI, probes) or heldout (the committed report alone) (%(default)s)",
    )
    p.add_argument(
        "--options", default="", help=f"stage-2 variants trained side by side with the default: {','.join(OPTIONS)}"
    )
    p.add_argument("--no-control", action="store_true", help="skip the lr = 0 controls")
    p.add_argument(
        "--ci-check",
        type=Path,
        metavar="DIR",
        help="no run: CI's learning check on DIR/learning.json's trained run and its lr = 0 control, into --out",
    )
    p.add_argument("--no-greedy", action="store_true", help="skip the greedy evaluation (its targets go unchecked)")
    p.add_argument("--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1")
    p.add_argument(
        "--protocol", choices=sorted(SPEAKERS), default="r1-searcher", help="the tags both stages speak (%(default)s)"
    )
    p.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="no run: join the seeds of earlier runs' DIR/learning.json (same steps1, lr, eval samples) into --out",
    )
    args = p.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out.resolve())
    if args.ci_check:
        return show_ci_check(args.ci_check, args.out)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if stages not in (["stage1"], ["stage1", "stage2"]):
        p.error("--stages: stage1 or stage1,stage2 (stage 2 starts from stage 1's checkpoint)")
    options = [o for o in args.options.split(",") if o]
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        p.error(f"--options: unknown {unknown}; known: {sorted(OPTIONS)}")
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    flags = PROTOCOL_FLAGS[args.protocol]
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "protocol": args.protocol,
        "prompt_template": base_template(args.protocol),
        "commit": commit(),
        "warm_start": warm_start_record(args.protocol),
        "fictional_world": fictional_world(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"} | {"out": str(out)},
        "seeds": [],
    }
    exit_on_sigterm()
    servers = Servers(out, parallel=max(2, 1 + (not args.no_control) + len(options)))
    t0 = time.monotonic()
    try:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            home = out / f"seed{seed}"
            entry: dict[str, Any] = {"seed": seed}

            def judge(checkpoint: Path, stage: str, seed: int = seed) -> dict:
                return evaluate(
                    checkpoint, stage, servers, args.eval_samples, seed, flags, not args.no_greedy, args.split
                )

            warm = ensure_warm_start(args.protocol)
            runs1 = [partial(run_stage, "stage1", args.steps1, home / "runs", args.lr, seed, warm, flags, servers)]
            if not args.no_control:
                c_out = home / "control"
                runs1.append(partial(run_stage, "stage1", args.steps1, c_out, 0.0, seed, warm, flags, servers))
            s1, *c1 = side_by_side(*runs1)
            stage1_final = Path(s1["hf_checkpoint"])
            entry["stage1"] = {"train": s1, "eval": {}}
            ev = entry["stage1"]["eval"]
            ev["warm_start"] = judge(warm, "stage1")
            ev["final"] = judge(stage1_final, "stage1")
            if c1:
                entry["stage1"]["control"] = c1[0]
                ev["control"] = judge(Path(c1[0]["hf_checkpoint"]), "stage1")
            if seed == 0:
                copy_model(warm, home / "stage1/warm_start")
                copy_model(stage1_final, home / "stage1/final")
            if "stage2" in stages:
                runs2 = [partial(run_stage, "stage2", args.steps2, home / "runs", args.lr, seed, None, flags, servers)]
                if not args.no_control:
                    c_out, c_from = home / "control", stage1_final
                    runs2.append(partial(run_stage, "stage2", args.steps2, c_out, 0.0, seed, c_from, flags, servers))
                for name in options:
                    o_out, o_flags = home / name, [*flags, *OPTIONS[name]]
                    runs2.append(
                        partial(run_stage, "stage2", args.steps2, o_out, args.lr, seed, stage1_final, o_flags, servers)
                    )
                s2, *rest = side_by_side(*runs2)
                c2, opts = rest[: len(rest) - len(options)], rest[len(rest) - len(options) :]
                entry["stage2"] = {"train": s2, "eval": {}}
                ev2 = entry["stage2"]["eval"]
                ev2["start"] = judge(stage1_final, "stage2")
                ev2["final"] = judge(Path(s2["hf_checkpoint"]), "stage2")
                if c2:
                    entry["stage2"]["control"] = c2[0]
                    ev2["control"] = judge(Path(c2[0]["hf_checkpoint"]), "stage2")
                for name, o in zip(options, opts, strict=True):
                    entry["stage2"][name] = o
                    ev2[name] = judge(Path(o["hf_checkpoint"]), "stage2")
                if seed == 0:
                    copy_model(stage1_final, home / "stage2/start")
                    copy_model(Path(s2["hf_checkpoint"]), home / "stage2/final")
            report["seeds"].append(entry)
            (out / "learning.json").write_text(json.dumps(report | {"summary": summary(report)}, indent=1))
    finally:
        servers.close()
    report["seconds"] = round(time.monotonic() - t0, 1)
    report["summary"] = summary(report)
    (out / "learning.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    plot(report, out / "learning.png")
    print(json.dumps(report["summary"], indent=1))
    return 0


MERGE_KEYS = ("steps1", "lr", "eval_samples", "protocol", "split")


def show_ci_check(folder: Path, out: Path) -> int:
    """CI's check on a run and on its control, written to `out` (JSON): it must pass the one and fail the other."""
    report = json.loads((folder / "learning.json").read_text(encoding="utf-8"))
    runs = ["final", *(["control"] if "control" in report["seeds"][0]["stage1"]["eval"] else [])]
    checked = {run: ci_check(report, run) for run in runs}
    stages = [s for s in ("stage1", "stage2") if s in report["seeds"][0]]
    figures = {s: {k: v.get("em" if s == "stage2" else "score") for k, v in report["seeds"][0][s]["eval"].items()}
               for s in stages}  # fmt: skip
    result = {
        "date": report["date"], "machine": report["machine"], "commit": report["commit"],
        "settings": report["settings"], "figures": figures, "problems": checked,
        "trained_passes": not checked["final"], "control_fails": bool(checked.get("control")),
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result["problems"], indent=1))
    return 0 if result["trained_passes"] and (result["control_fails"] or "control" not in checked) else 1


def ci_check(report: dict[str, Any], run: str = "final") -> list[str]:
    """CI's learning check on a report's first seed: what fails, nothing when it passes. `run`: the checkpoint judged
    against its start, "final" (trained) or "control" (the same seed at lr = 0, which must fail)."""
    seed, problems = report["seeds"][0], []
    ev = seed["stage1"]["eval"]
    if run not in ev:
        return [f"stage 1: no {run!r} evaluation in this report"]
    before, after = ev["warm_start"]["score"], ev[run]["score"]
    if after - before < CI_STAGE1_GAIN:
        problems.append(f"stage 1: format-and-search rate {before:.3f} -> {after:.3f}, a gain under {CI_STAGE1_GAIN}")
    if "stage2" not in seed:
        return problems
    ev2 = seed["stage2"]["eval"]
    start, end = ev2["start"]["em"], ev2[run]["em"]
    if not (end - start >= CI_STAGE2_GAIN or (end >= STAGE2_EM and end - start >= CI_STAGE2_MIN_GAIN)):
        problems.append(
            f"stage 2: EM {start:.3f} -> {end:.3f}: neither a gain of {CI_STAGE2_GAIN} nor {STAGE2_EM} reached with "
            f"a gain of {CI_STAGE2_MIN_GAIN}"
        )
    reading = ev2[run]["copy"]["swapped_shown_city"]
    if reading < CI_READING:
        problems.append(f"stage 2: with another person's documents the answer follows them in {reading:.3f}")
    return problems


def run_records(folder: Path, report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each run's own record: runs side by side may measure different checkouts (the top-level `commit` is the first
    run's), so which seed came from which commit and warm start stays traceable. A report merged before gives its
    runs' records as they are, so the list stays one level deep whatever order runs are joined in."""
    return report.get("merged_from") or [
        {"dir": str(folder), "seeds": [s["seed"] for s in report["seeds"]]}
        | {k: report.get(k) for k in ("commit", "warm_start", "fictional_world", "settings")}
    ]


def merge(dirs: list[Path], out: Path) -> int:
    """One report from several runs' seeds (say seed 0 with stage 2 and its options, seeds 1-2 of stage 1 alone),
    the summary and the curves computed again; refused when the runs differ in what makes seeds comparable."""
    reports = [json.loads((d / "learning.json").read_text(encoding="utf-8")) for d in dirs]
    first = reports[0]
    for d, r in zip(dirs, reports, strict=True):
        setting = lambda report, k: report["settings"].get(k, "r1-searcher" if k == "protocol" else None)  # noqa: E731
        differ = [k for k in MERGE_KEYS if setting(r, k) != setting(first, k)]
        if differ:
            raise SystemExit(f"--merge: {d} differs from {dirs[0]} in {differ}; seeds are comparable only when equal")
    seeds = [s for r in reports for s in r["seeds"]]
    numbers = [s["seed"] for s in seeds]
    if len(set(numbers)) != len(numbers):
        raise SystemExit(f"--merge: a seed appears twice ({sorted(numbers)}); run the others with --first-seed")
    report = first | {
        "seeds": sorted(seeds, key=lambda s: s["seed"]),
        "merged_from": [m for d, r in zip(dirs, reports, strict=True) for m in run_records(d, r)],
        "seconds": round(sum(r.get("seconds", 0.0) for r in reports), 1),
    }
    report["summary"] = summary(report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "learning.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    plot(report, out / "learning.png")
    print(json.dumps(report["summary"], indent=1))
    return 0


COPY_KEYS = ("names_rate", "doc_city", "swapped_shown_city", "swapped_gold", "top_city_share")
GREEDY_KEYS = ("episodes", "score", "reward", "em", "searches_per_episode", "search_errors")


def steps_to(log: list[dict[str, float]], key: str, level: float) -> int | None:
    """The first rollout step whose training batch reached `level` (None: never)."""
    return next((int(r["step"]) for r in log if r.get(key, 0.0) >= level), None)


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """Means over seeds of each evaluation (the copy probe's rates included), and the issue's targets, met or not."""
    out: dict[str, Any] = {}
    for stage, start in (("stage1", "warm_start"), ("stage2", "start")):
        evals = [s[stage]["eval"] for s in report["seeds"] if stage in s]
        if not evals:
            continue
        names = sorted({k for e in evals for k in e})
        means = {n: {m: statistics.fmean(e[n][m] for e in evals if n in e) for m in ("score", "reward", "em",
                 "searches_per_episode", "response_length")} for n in names}  # fmt: skip
        for n in names:
            greedy = [e[n]["greedy"] for e in evals if n in e and "greedy" in e[n]]
            for k in ("score", "em"):
                means[n][f"greedy_{k}"] = statistics.fmean(g[k] for g in greedy) if greedy else None
            for k in COPY_KEYS:
                vals = [e[n]["copy"][k] for e in evals if n in e and e[n].get("copy", {}).get(k) is not None]
                means[n][k] = statistics.fmean(vals) if vals else None
        copy = lambda e, n, k: (e.get(n, {}).get("copy") or {}).get(k)  # noqa: E731
        worst_gain = min(e["final"]["score"] - e[start]["score"] for e in evals)
        entry: dict[str, Any] = {"mean": means, "worst_seed_gain": worst_gain}
        if stage == "stage1":
            final = STAGE1_FINAL[report.get("protocol", "r1-searcher")]
            gaps = [e["final"]["score"] - e["control"]["score"] for e in evals if "control" in e]
            entry["worst_seed_gap_to_control"] = min(gaps) if gaps else None
            entry["targets"] = {
                f"final_at_least_{final}": min(e["final"]["score"] for e in evals) >= final,
                "mean_final_at_least_0.8": statistics.fmean(e["final"]["score"] for e in evals) >= 0.8,
                "above_control_by_at_least_0.25": bool(gaps) and min(gaps) >= 0.25,
                "above_control_by_at_least_0.4": bool(gaps) and min(gaps) >= 0.4,
                "gain_at_least_0.3": worst_gain >= 0.3,
                "control_moves_less_than_0.1": all(
                    abs(e["control"]["score"] - e[start]["score"]) < 0.1 for e in evals if "control" in e
                ),
                "warm_start_names_at_least_0.5": all((copy(e, start, "names_rate") or 0) >= 0.5 for e in evals),
                "warm_start_doc_city_0.1_to_0.4": all(0.1 <= (copy(e, start, "doc_city") or 0) <= 0.4 for e in evals),
                "stage2_start_names_at_least_0.8": all((copy(e, "final", "names_rate") or 0) >= 0.8 for e in evals),
            }
        else:
            entry["worst_seed_em_gain"] = min(e["final"]["em"] - e[start]["em"] for e in evals)
            # EM, sampled and greedy: the targets on each, so neither decoding can hide behind the other.
            entry["targets"] = {}
            for label, em in (("sampled", lambda e, n: e[n]["em"]), ("greedy", lambda e, n: e[n]["greedy"]["em"])):
                if label == "greedy" and not all("greedy" in e[n] for e in evals for n in e):
                    continue
                gain = min(em(e, "final") - em(e, start) for e in evals)
                entry[f"worst_seed_em_gain_{label}"] = gain
                entry["targets"] |= {
                    f"em_at_least_0.6_{label}": min(em(e, "final") for e in evals) >= 0.6,
                    f"em_gain_at_least_0.3_{label}": gain >= 0.3,
                    f"control_moves_less_than_0.05_{label}": all(
                        abs(em(e, "control") - em(e, start)) < 0.05 for e in evals if "control" in e
                    ),
                }
            entry["targets"] |= {
                "searches_at_least_0.9": min(e["final"]["searches_per_episode"] for e in evals) >= 0.9,
                "top_city_at_most_0.25": all((copy(e, "final", "top_city_share") or 1) <= 0.25 for e in evals),
                "reads_swapped_documents_at_least_0.5": all(
                    (copy(e, "final", "swapped_shown_city") or 0) >= 0.5 for e in evals
                ),
                "mean_em_at_least_0.8_sampled": statistics.fmean(e["final"]["em"] for e in evals) >= STAGE2_EM,
                "mean_reads_swapped_documents_at_least_0.9": statistics.fmean(
                    copy(e, "final", "swapped_shown_city") or 0 for e in evals
                )
                >= 0.9,
            }
            runs = sorted({k for s in report["seeds"] for k in s.get("stage2", {}) if k not in ("eval", "control")})
            entry["steps_to_em_0.5"] = {
                run: {s["seed"]: steps_to(s["stage2"][run]["steps_log"], "em", 0.5) for s in report["seeds"]
                      if run in s.get("stage2", {})} for run in runs
            }  # fmt: skip
        out[stage] = entry
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("stage1", "score", "stage 1: format-and-search rate"),
        ("stage1", "reward", "stage 1: mean reward"),
        ("stage2", "em", "stage 2: EM"),
        ("stage2", "searches_per_episode", "stage 2: searches per episode"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (stage, key, title) in zip(axes.flat, panels, strict=True):
        for s in report["seeds"]:
            if stage not in s:
                continue
            for run, style in (("train", "-"), ("control", "--"), ("grpo", ":"), ("dynamic", "-.")):
                if run in s[stage]:
                    log = s[stage][run]["steps_log"]
                    tag = {"train": "", "control": " lr=0", "grpo": " GRPO", "dynamic": " dyn. filter"}[run]
                    label = f"seed {s['seed']}{tag}"
                    ax.plot([r["step"] for r in log], [r.get(key, 0) for r in log], style, label=label)
        ax.set_title(title)
        ax.set_xlabel("rollout step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(f"searchrl tiny policy on OpenRLHF train_ppo_ray, CPU ({report['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
