"""`searchrl stage submit|preflight|dry-run STAGE [--model X] [key=value ...]`: check and submit a stage to Ray.

Resolves the stage and model configs into a plan (searchrl/job/plan.py: OpenRLHF's `train_ppo_ray` flags, each
checked by OpenRLHF's own parser, and the job's runtime_env), runs the preflight checks
(searchrl/job/preflight.py) and `ray job submit`. `preflight` runs the checks alone; `dry-run` prints the command
and contacts nothing. `launch/ray_submit.sh STAGE [--dry-run|--preflight|--rehearse]` is the same, by flag.
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

from searchrl.config import ConfigError
from searchrl.job import preflight, sft
from searchrl.job.plan import masked, plan_stage, ray_command, runtime_env
from searchrl.job.readiness import wait_until_ready
from searchrl.paths import ROOT
from searchrl.process import own_tool
from searchrl.stage.config import CONFIG_JSON_ENV, STAGES, StageConfig
from searchrl.stage.schedules import add_schedule_flags, gpus_needed, schedule_overrides

RAY_MISSING = (
    "`ray` is not installed here: bash launch/install_gpu.sh on the submitting machine (Ray 2.55 and OpenRLHF)"
)
DESCRIPTIONS = {
    "submit": "run every check of a submission, then `ray job submit` the stage",
    "preflight": "run every check of a submission and print a checklist; submits nothing",
    "dry-run": "print the exact `ray job submit` command and exit; contacts nothing",
}
STAGE_HELP = (
    "stage1: format reward; stage2: format + answer reward; router_r1: LLM routing (Router-R1); "
    "rag_r1: stage 2 with RAG-R1's multi-query search"
)


# Under async the engines generate while the actor trains, so they cannot share its GPUs as the stage files have them.
ASYNC_GPUS = {
    s: " (the engines beside the actor's, not on them: on one 8-GPU node, set actor/ref.num_gpus_per_node=4 and "
    "vllm.num_engines=4)"
    for s in ("async", "async-partial")
}


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one `searchrl stage` command: `submit`, `preflight` or `dry-run`."""
    p = argparse.ArgumentParser(prog=f"searchrl stage {command}", description=DESCRIPTIONS[command])
    stages = sorted(STAGES) if command == "preflight" else [*sorted(STAGES), "sft"]
    sft_help = "" if command == "preflight" else "; sft: supervised fine-tuning on trajectories (OpenRLHF's train_sft)"
    p.add_argument("stage", choices=stages, help=STAGE_HELP + sft_help)
    p.add_argument("--model", default=None, help="a configs/models/*.yaml file (default: the stage config's)")
    if command != "preflight":
        p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="Ray dashboard address ($RAY_ADDRESS)")
    if command != "preflight":
        ready = p.add_argument_group("stage switch (stage2)")
        ready.add_argument(
            "--when-ready",
            action="store_true",
            help="wait until the init_from stage's logged format and search rates cross the thresholds"
            + (" (a dry run looks once and does not wait)" if command == "dry-run" else ""),
        )
        ready.add_argument("--min-format-rate", type=float, default=0.9, help="format pass rate to reach (0.9)")
        ready.add_argument("--min-search-rate", type=float, default=0.9, help="share of episodes that search (0.9)")
        ready.add_argument("--window", type=int, default=10, help="last logged steps averaged (default 10)")
        ready.add_argument("--poll-s", type=float, default=300.0, help="seconds between looks at the logs")
        ready.add_argument("--wait-s", type=float, default=7 * 24 * 3600.0, help="give up after this long")
    add_schedule_flags(p)
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config overrides, e.g. openrlhf.rollout.batch_size=32"
    )
    return p


def run(command: str, argv: list[str] | None) -> int:
    args = build_parser(command).parse_intermixed_args(argv)
    if args.stage == "sft" and args.schedule:
        print("error: --async / --partial-rollout: the SFT stage has no rollouts", file=sys.stderr)
        return 2
    args.overrides = [*schedule_overrides(args), *args.overrides]
    dry_run = command == "dry-run"
    address = getattr(args, "address", None)  # preflight contacts no Ray
    if args.stage == "sft":
        return sft.submit(args.overrides, address, dry_run)
    try:
        plan = plan_stage(args.stage, args.model, args.overrides)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stage: StageConfig = plan["stage"]
    switch = None
    if getattr(args, "when_ready", False):
        if plan["previous"] is None:
            print(f"error: --when-ready needs init_from in the {stage.stage} config", file=sys.stderr)
            return 2
        switch = wait_until_ready(plan["previous"][0], plan["policy"], args, once=dry_run)
        if not switch["ready"]:
            print(
                f"not ready: {plan['previous'][0].stage}: thresholds not crossed or final checkpoint not written",
                file=sys.stderr,
            )
            return 4
    env = runtime_env(plan)
    cmd = ray_command(plan, address, env)
    shown = ray_command(plan, address, masked(env))
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
    print(f"# schedule {stage.schedule}: {gpus_needed(plan['flags'])} GPUs" + ASYNC_GPUS.get(stage.schedule, ""))
    print(shlex.join(shown))
    resolved.parent.mkdir(parents=True, exist_ok=True)
    if dry_run:
        # What would be launched, beside (never over) the record of what was launched.
        resolved.with_suffix(".dry-run.json").write_text(
            json.dumps({**record, "config": stage.model_dump()}, indent=2)
        )
        return 0
    checks = preflight.submission_checks(plan, env)
    print(f"# preflight for {stage.stage}:")
    ok = preflight.report(checks)
    if command == "preflight":
        return 0 if ok else 1
    if not ok:
        print("error: preflight failed; nothing was submitted (fix the items marked FAIL above)", file=sys.stderr)
        return 1
    ray = own_tool("ray")
    if ray is None:
        print(f"error: {RAY_MISSING}", file=sys.stderr)
        return 3
    resolved.write_text(stage.model_dump_json(indent=2))
    resolved.with_suffix(".launch.json").write_text(json.dumps(record, indent=2))
    return subprocess.run([ray, *cmd[1:]], cwd=ROOT).returncode


def main(argv: list[str] | None = None) -> int:
    """`searchrl stage submit`."""
    return run("submit", argv)


def preflight_main(argv: list[str] | None = None) -> int:
    """`searchrl stage preflight`."""
    return run("preflight", argv)


def dry_run_main(argv: list[str] | None = None) -> int:
    """`searchrl stage dry-run`."""
    return run("dry-run", argv)


if __name__ == "__main__":
    sys.exit(main())
