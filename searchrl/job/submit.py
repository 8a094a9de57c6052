"""Submit a training stage to Ray: `launch/ray_submit.sh STAGE [--model X] [--dry-run] [key=value ...]`.

Resolves the stage and model configs, renders OpenRLHF's `train_ppo_ray` flags (every one checked
by OpenRLHF's own parser), runs the preflight checks (searchrl/job/preflight.py) and `ray job submit`.
The resolved config travels inline in the job's env_vars, the upload holds code and configs only,
and the tokens the workers need are forwarded, masked wherever they are shown. `--preflight` runs
the checks alone; `--rehearse` runs the job as Ray runs it, on CPU (searchrl/rehearsal/episodes.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError, load
from searchrl.job import preflight
from searchrl.paths import ROOT
from searchrl.stage.config import CONFIG_JSON_ENV, StageConfig, load_stage, stage_package
from searchrl.stage.openrlhf_flags import render_flags, validated_args
from searchrl.stage.prompt import effective_model

# Command-line stage names and their configs; `rag_r1` is stage 2 with RAG-R1's multi-query search.
STAGES = {"stage1": "stage1_format", "stage2": "stage2_answer", "router_r1": "router_r1", "rag_r1": "rag_r1"}
# Flags whose values are paths on the submitting machine: made absolute so every Ray worker, whose
# working directory is the uploaded copy of the code, reads the same files (shared storage on a cluster).
PATH_FLAGS = ("data.prompt_dataset", "ckpt.output_dir", "ckpt.path", "logger.tensorboard_dir", "eval.dataset")
# What the job imports (the agent file and the packages behind it) and the configs; everything else in
# the repository root (indexes, corpora, checkpoints, runs/) stays home.
UPLOAD = (
    "searchrl",
    "rollout",
    "search_backend",
    "routing",
    "reward_server",
    "eval",
    "stage1_format",
    "stage2_answer",
    "stage_router_r1",
    "configs",
    "pyproject.toml",
)
ALWAYS_EXCLUDED = ["__pycache__", "*.pyc", "/configs/resolved"]
# Set on the submitting shell, needed on the workers (which inherit `ray start`'s environment, not ours).
ALWAYS_FORWARDED = ("WANDB_API_KEY", "HF_TOKEN")
# Flags whose values are secrets: the value travels in an env var and the command names the variable.
SECRET_FLAGS = {"logger.wandb.key": "WANDB_API_KEY"}
MASK = "***"
RAY_MISSING = (
    "`ray` is not installed here: pip install -e '.[train]' on the submitting machine (Ray 2.55 and OpenRLHF)"
)


def _absolute(value: Any) -> Any:
    return str((ROOT / value).resolve()) if isinstance(value, str) and not Path(value).is_absolute() else value


def previous_stage(stage: StageConfig, stage_file: Path) -> tuple[StageConfig, Path] | None:
    """The stage named by `init_from`, whose final checkpoint and logs this stage builds on."""
    if not stage.init_from:
        return None
    source = Path(stage.init_from) if Path(stage.init_from).is_file() else stage_file.parent / stage.init_from
    return load(StageConfig, source), source


def starting_policy(stage: StageConfig, stage_file: Path, model_path: str) -> tuple[str, str]:
    """The policy the stage starts from, and why: an explicit flag, the previous stage's final
    checkpoint (`init_from`), or the model config's path."""
    if "actor.model_name_or_path" in stage.openrlhf:
        return str(stage.openrlhf["actor.model_name_or_path"]), "openrlhf.actor.model_name_or_path"
    found = previous_stage(stage, stage_file)
    if found:
        previous, source = found
        out = previous.openrlhf.get("ckpt.output_dir")
        if not out:
            raise ConfigError(f"{source}: openrlhf.ckpt.output_dir: needed to start {stage.stage} from it (init_from)")
        return _absolute(out), f"final checkpoint of {previous.stage} ({source})"
    return model_path, "model config"


def resolve(stage_name: str, model: str | None, overrides: list[str]) -> dict[str, Any]:
    """The stage, its model, the starting policy and the rendered OpenRLHF flags."""
    stage_file = ROOT / "configs/stages" / f"{STAGES[stage_name]}.yaml"
    overrides = ([f"model={model}"] if model else []) + overrides
    stage, model_cfg = load_stage(stage_file, overrides)
    model_cfg = effective_model(model_cfg, stage)
    policy, policy_source = starting_policy(stage, stage_file, model_cfg.model_path)
    flags = {name: _absolute(v) if name in PATH_FLAGS else v for name, v in stage.openrlhf.items()}
    flags["actor.model_name_or_path"] = policy
    flags["train.agent_func_path"] = f"{stage_package(stage.stage)}/agent_func.py"
    secrets = {env: str(flags[name]) for name, env in SECRET_FLAGS.items() if flags.get(name)}
    hidden = {name: f"${env}" for name, env in SECRET_FLAGS.items() if flags.get(name)}
    # The job's shell expands `$WANDB_API_KEY` from env_vars: the key never appears in a command line
    # nor in the config that travels inline.
    flags.update(hidden)
    stage = stage.model_copy(update={"openrlhf": {**stage.openrlhf, **hidden}})
    args = render_flags(flags)
    validated_args(args)  # OpenRLHF's parser, then the checks train_ppo_ray makes before it starts Ray
    return {
        "stage": stage,
        "stage_name": stage_name,
        "previous": previous_stage(stage, stage_file),
        "model": model_cfg,
        "policy": policy,
        "policy_source": policy_source,
        "flags": flags,
        "train_args": args,
        "flag_secrets": secrets,
        "resolved_path": ROOT / "configs/resolved" / f"{STAGES[stage_name]}.json",
    }


def secret_names(stage: StageConfig) -> list[str]:
    """Environment variables holding what the workers need to authenticate: the servers' tokens,
    the search provider's and summariser's keys, the router's endpoint keys, W&B and HF tokens."""
    from search_backend.web import PROVIDERS, WebSearchConfig

    names = [stage.reward_server.token_env]
    search = stage.search
    if search.backend == "http":
        names.append(search.token_env)
    elif search.backend == "web":
        web = search.web or WebSearchConfig()
        names.append(web.api_key_env or PROVIDERS[web.provider].key_env or "")
        if web.summarize:
            names.append(web.summarizer_api_key_env)
    elif search.backend == "router" and search.router is not None:
        names += [m.api_key_env for m in search.router.models if m.api_key_env]
    names += ALWAYS_FORWARDED
    return [n for n in dict.fromkeys(names) if n]


def excludes(root: Path = ROOT) -> list[str]:
    """Ray `excludes` (gitignore patterns) naming every top-level entry outside UPLOAD. Listed by name
    because a catch-all `/*` would also match the working_dir itself in Ray's walk."""
    names = sorted(p.name for p in root.iterdir() if p.name not in UPLOAD)
    return ["/" + re.sub(r"([*?\[\]!#\\])", r"\\\1", n) for n in names] + ALWAYS_EXCLUDED


def runtime_env(plan: dict[str, Any]) -> dict[str, Any]:
    """The job's runtime_env: the code and configs, the resolved config inline (a file would have to
    be uploaded or on shared storage; env_vars reach every worker), and the secrets that are set."""
    stage: StageConfig = plan["stage"]
    env_vars = {CONFIG_JSON_ENV: stage.model_dump_json()}
    env_vars.update({n: os.environ[n] for n in secret_names(stage) if os.environ.get(n)})
    env_vars.update(plan["flag_secrets"])
    return {"working_dir": str(ROOT), "excludes": excludes(), "env_vars": env_vars}


def ray_command(plan: dict[str, Any], address: str | None, env: dict[str, Any] | None = None) -> list[str]:
    env = env if env is not None else runtime_env(plan)
    cmd = ["ray", "job", "submit"]
    if address:
        cmd += ["--address", address]
    cmd += ["--runtime-env-json", json.dumps(env), "--", "python3", "-m", "openrlhf.cli.train_ppo_ray"]
    return cmd + plan["train_args"]


def masked(env: dict[str, Any]) -> dict[str, Any]:
    """The runtime_env as it may be shown or written down: every secret's value replaced."""
    hidden = {k: (v if k == CONFIG_JSON_ENV else MASK) for k, v in env.get("env_vars", {}).items()}
    return {**env, "env_vars": hidden}


def preflight_checks(plan: dict[str, Any], env: dict[str, Any], run_dir: Path | None = None) -> list[preflight.Check]:
    stage: StageConfig = plan["stage"]
    checks = [
        preflight.Check(
            "flags parse", True, f"{len(plan['train_args'])} arguments, OpenRLHF 0.11.2's own parser and checks"
        ),
        preflight.check_ray_cli(),
        preflight.check_config(env, stage),
    ]
    package, _ = preflight.check_package(env, plan["flags"]["train.agent_func_path"])
    checks += package
    checks += preflight.check_servers(stage, run_dir or ROOT / "runs/servers")
    checks += preflight.check_data(stage, plan["flags"], plan["model"], plan["stage_name"])
    checks += preflight.check_checkpoint(plan["policy"], plan["policy_source"])
    forwarded = sorted(k for k in env["env_vars"] if k != CONFIG_JSON_ENV)
    checks.append(
        preflight.Check("secrets forwarded", True, ", ".join(forwarded) + " (masked)" if forwarded else "none set")
    )
    return checks


def readiness(previous: StageConfig, min_format: float, min_search: float, window: int) -> dict[str, Any]:
    """Whether the previous stage's logged format pass rate and search rate (means over its last
    `window` steps) have crossed the thresholds."""
    from searchrl.curves import read_curves

    logdir = previous.openrlhf.get("logger.tensorboard_dir")
    if not logdir:
        raise ConfigError(f"{previous.stage}: openrlhf.logger.tensorboard_dir: needed to read its progress")
    try:
        curves = read_curves(Path(_absolute(logdir)))
    except FileNotFoundError:
        return {"ready": False, "logdir": _absolute(logdir), "reason": "no logs yet"}
    means = {}
    for name in ("format_ok", "searched"):
        values = [v for _, v in curves.get(name, [])][-window:]
        means[name] = sum(values) / len(values) if values else 0.0
    step = max((s for points in curves.values() for s, _ in points), default=0)
    ready = means["format_ok"] >= min_format and means["searched"] >= min_search
    return {
        "ready": ready,
        "logdir": _absolute(logdir),
        "step": step,
        **means,
        "thresholds": {"format_ok": min_format, "searched": min_search, "window": window},
    }


def wait_until_ready(previous: StageConfig, checkpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    """Wait until the previous stage's logged rates cross the thresholds and its final checkpoint
    exists: OpenRLHF writes `ckpt.output_dir` only when its run ends, so good curves alone are not enough."""
    deadline = time.monotonic() + args.wait_s
    while True:
        status = readiness(previous, args.min_format_rate, args.min_search_rate, args.window)
        status["checkpoint"] = checkpoint
        status["checkpoint_written"] = (Path(checkpoint) / "config.json").is_file()
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in status.items() if k != "thresholds"}
        print(f"# {previous.stage} progress: {shown}", flush=True)
        if status["ready"] and not status["checkpoint_written"]:
            print(
                f"# {previous.stage} has crossed the thresholds; waiting for its final checkpoint in {checkpoint} "
                "(OpenRLHF writes it when the run ends: stop it early with train.num_episodes or let it finish)",
                flush=True,
            )
        status["ready"] = status["ready"] and status["checkpoint_written"]
        if status["ready"] or args.dry_run or time.monotonic() + args.poll_s > deadline:
            return status
        time.sleep(args.poll_s)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch/ray_submit.sh", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument(
        "stage",
        choices=[*sorted(STAGES), "sft"],
        help="stage1: format reward; stage2: format + answer reward; router_r1: LLM routing (Router-R1); "
        "sft: supervised fine-tuning on trajectories (OpenRLHF's train_sft)",
    )
    p.add_argument("--model", default=None, help="a configs/models/*.yaml file (default: the stage config's)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the exact command and exit; contacts nothing")
    mode.add_argument(
        "--preflight", action="store_true", help="run every check of a submission, print a checklist, submit nothing"
    )
    mode.add_argument(
        "--rehearse",
        action="store_true",
        help="run the job as Ray runs it on CPU: local Ray head, servers on the bundled mini index, "
        "`ray job submit` with the real runtime_env, OpenRLHF's rollout and experience code",
    )
    p.add_argument("--episodes", type=int, default=8, help="--rehearse: prompts to run (default 8)")
    train = p.add_argument_group("training rehearsal (--rehearse --train)")
    train.add_argument(
        "--train",
        action="store_true",
        help="--rehearse: run OpenRLHF's own train_ppo_ray (both halves of a step: rollout and training) with "
        "a tiny policy on CPU; prints a per-step table and, last, one JSON line",
    )
    train.add_argument("--steps", type=int, default=2, help="--train: rollout steps (default 2)")
    train.add_argument("--no-resume", action="store_true", help="--train: skip the resume-from-checkpoint run")
    train.add_argument("--out", type=Path, default=None, help="--train: folder (default runs/rehearse/train)")
    train.add_argument("--pretrain", type=Path, default=None, help="--train: start from this HF folder instead")
    train.add_argument("--lr", type=float, default=None, help="--train: the tiny policy's learning rate (1e-3)")
    train.add_argument("--seed", type=int, default=0, help="--train: seed of the warm start and the run")
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="Ray dashboard address ($RAY_ADDRESS)")
    ready = p.add_argument_group("stage switch (stage2)")
    ready.add_argument(
        "--when-ready",
        action="store_true",
        help="wait until the init_from stage's logged format and search rates cross the thresholds",
    )
    ready.add_argument("--min-format-rate", type=float, default=0.9, help="format pass rate to reach (default 0.9)")
    ready.add_argument("--min-search-rate", type=float, default=0.9, help="share of episodes that search (0.9)")
    ready.add_argument("--window", type=int, default=10, help="last logged steps averaged (default 10)")
    ready.add_argument("--poll-s", type=float, default=300.0, help="seconds between looks at the logs")
    ready.add_argument("--wait-s", type=float, default=7 * 24 * 3600.0, help="give up after this long")
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config overrides, e.g. openrlhf.rollout.batch_size=32"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    if args.train and not args.rehearse:
        print("error: --train goes with --rehearse (`searchrl stage rehearse STAGE --train`)", file=sys.stderr)
        return 2
    if args.stage == "sft":
        from searchrl.job import sft

        if args.rehearse:
            return sft.rehearse_main(args.overrides, args.seed)
        return sft.submit(args.overrides, args.address, args.dry_run)
    if args.rehearse and args.train:
        from searchrl.rehearsal import training as train_rehearsal

        return train_rehearsal.main(
            args.stage,
            args.model,
            args.overrides,
            args.steps,
            resume=not args.no_resume,
            out=args.out,
            pretrain=args.pretrain,
            lr=args.lr if args.lr is not None else train_rehearsal.DEFAULT_LR,
            seed=args.seed,
        )
    if args.rehearse:
        from searchrl.rehearsal.episodes import rehearse

        return rehearse(args.stage, args.model, args.overrides, args.episodes)
    try:
        plan = resolve(args.stage, args.model, args.overrides)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stage: StageConfig = plan["stage"]
    switch = None
    if args.when_ready:
        if plan["previous"] is None:
            print(f"error: --when-ready needs init_from in the {stage.stage} config", file=sys.stderr)
            return 2
        switch = wait_until_ready(plan["previous"][0], plan["policy"], args)
        if not switch["ready"]:
            print(
                f"not ready: {plan['previous'][0].stage}: thresholds not crossed or final checkpoint not written",
                file=sys.stderr,
            )
            return 4
    env = runtime_env(plan)
    cmd = ray_command(plan, args.address, env)
    shown = ray_command(plan, args.address, masked(env))
    resolved: Path = plan["resolved_path"]
    record = {
        "stage": stage.stage,
        "model": plan["model"].name,
        "policy": plan["policy"],
        "policy_source": plan["policy_source"],
        "switch": switch,
        "command": shown,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(f"# {stage.stage}: policy {plan['policy']} ({plan['policy_source']}); config inline in ${CONFIG_JSON_ENV}")
    print(shlex.join(shown))
    resolved.parent.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        # What would be launched, beside (never over) the record of what was launched.
        resolved.with_suffix(".dry-run.json").write_text(
            json.dumps({**record, "config": stage.model_dump()}, indent=2)
        )
        return 0
    checks = preflight_checks(plan, env)
    print(f"# preflight for {stage.stage}:")
    ok = preflight.report(checks)
    if args.preflight:
        return 0 if ok else 1
    if not ok:
        print("error: preflight failed; nothing was submitted (fix the items marked FAIL above)", file=sys.stderr)
        return 1
    if shutil.which("ray") is None:
        print(f"error: {RAY_MISSING}", file=sys.stderr)
        return 3
    resolved.write_text(stage.model_dump_json(indent=2))
    resolved.with_suffix(".launch.json").write_text(json.dumps(record, indent=2))
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
