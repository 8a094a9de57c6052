"""Submit a training stage to Ray: `launch/ray_submit.sh stage1|stage2 [--model X] [--dry-run] [key=value ...]`.

Resolves the stage and model configs, renders OpenRLHF's `train_ppo_ray` flags (every one checked
by OpenRLHF's own parser), writes the resolved config that the agent reads in each engine process,
checks the servers answer `/health`, and runs `ray job submit`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from rollout.config import CONFIG_ENV, ConfigError, StageConfig, load, load_stage
from rollout.openrlhf_flags import check_args, render_flags

ROOT = Path(__file__).resolve().parent.parent
STAGES = {"stage1": "stage1_format", "stage2": "stage2_answer"}
# Flags whose values are paths on the submitting machine: made absolute so every Ray worker, whose
# working directory is the uploaded copy of the code, reads the same files (shared storage on a cluster).
PATH_FLAGS = ("data.prompt_dataset", "ckpt.output_dir", "ckpt.path", "logger.tensorboard_dir", "eval.dataset")
EXCLUDES = [".venv", "runs", ".git", "**/__pycache__", "benchmarks/results", "tests/fixtures"]


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
    stage_file = ROOT / "configs/stages" / f"{STAGES[stage_name]}.yaml"
    overrides = ([f"model={model}"] if model else []) + overrides
    stage, model_cfg = load_stage(stage_file, overrides)
    policy, policy_source = starting_policy(stage, stage_file, model_cfg.model_path)
    flags = {name: _absolute(v) if name in PATH_FLAGS else v for name, v in stage.openrlhf.items()}
    flags["actor.model_name_or_path"] = policy
    flags["train.agent_func_path"] = f"{stage.stage}/agent_func.py"
    args = render_flags(flags)
    check_args(args)
    resolved = ROOT / "configs/resolved" / f"{stage.stage}.json"
    return {
        "stage": stage,
        "previous": previous_stage(stage, stage_file),
        "model": model_cfg,
        "policy": policy,
        "policy_source": policy_source,
        "train_args": args,
        "resolved_path": resolved,
    }


def ray_command(plan: dict[str, Any], address: str | None) -> list[str]:
    runtime_env = {
        "working_dir": str(ROOT),
        "excludes": EXCLUDES,
        "env_vars": {CONFIG_ENV: str(plan["resolved_path"].relative_to(ROOT))},
    }
    cmd = ["ray", "job", "submit"]
    if address:
        cmd += ["--address", address]
    cmd += ["--runtime-env-json", json.dumps(runtime_env), "--", "python3", "-m", "openrlhf.cli.train_ppo_ray"]
    return cmd + plan["train_args"]


def check_health(stage: StageConfig, timeout_s: float = 5.0) -> list[str]:
    problems = []
    urls = [("reward server", u) for u in stage.reward_server.urls]
    if stage.search.backend == "http":
        urls += [("retrieval server", u) for u in stage.search.urls]
    for what, url in urls:
        try:
            r = httpx.get(f"{url.rstrip('/')}/health", timeout=timeout_s)
            if r.status_code != 200:
                problems.append(f"{what} {url}/health answered {r.status_code}")
        except httpx.HTTPError as e:
            problems.append(f"{what} {url}/health: {type(e).__name__} (start it with launch/start_servers.sh)")
    return problems


def readiness(previous: StageConfig, min_format: float, min_search: float, window: int) -> dict[str, Any]:
    """Whether the previous stage's logged format pass rate and search rate (means over its last
    `window` steps) have crossed the thresholds."""
    from eval.health import read_curves

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


def wait_until_ready(previous: StageConfig, args: argparse.Namespace) -> dict[str, Any]:
    deadline = time.monotonic() + args.wait_s
    while True:
        status = readiness(previous, args.min_format_rate, args.min_search_rate, args.window)
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in status.items() if k != "thresholds"}
        print(f"# {previous.stage} progress: {shown}", flush=True)
        if status["ready"] or args.dry_run or time.monotonic() + args.poll_s > deadline:
            return status
        time.sleep(args.poll_s)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launch/ray_submit.sh", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("stage", choices=sorted(STAGES), help="stage1: format reward; stage2: format + answer reward")
    p.add_argument("--model", default=None, help="a configs/models/*.yaml file (default: the stage config's)")
    p.add_argument("--dry-run", action="store_true", help="print the exact command and exit; contacts nothing")
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
        switch = wait_until_ready(plan["previous"][0], args)
        if not switch["ready"]:
            print(f"not ready: {plan['previous'][0].stage} has not crossed the thresholds", file=sys.stderr)
            return 4
    cmd = ray_command(plan, args.address)
    resolved: Path = plan["resolved_path"]
    resolved.parent.mkdir(parents=True, exist_ok=True)
    resolved.write_text(stage.model_dump_json(indent=2))
    record = {
        "stage": stage.stage,
        "model": plan["model"].name,
        "policy": plan["policy"],
        "policy_source": plan["policy_source"],
        "switch": switch,
        "command": cmd,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    resolved.with_suffix(".launch.json").write_text(json.dumps(record, indent=2))
    print(f"# {stage.stage}: policy {plan['policy']} ({plan['policy_source']}); config {resolved.relative_to(ROOT)}")
    print(shlex.join(cmd))
    if args.dry_run:
        return 0
    problems = check_health(stage)
    if problems:
        print("error: servers not ready:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
