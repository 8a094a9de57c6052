"""A stage's submission plan: the stage and model configs resolved, the starting policy, OpenRLHF's
`train_ppo_ray` flags (each checked by OpenRLHF's own parser), and the job's runtime_env: what is uploaded, the
resolved config inline in its env_vars, the forwarded secrets (masked wherever they are shown).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError, load
from searchrl.paths import CONFIGS, ROOT
from searchrl.stage.config import (
    CONFIG_JSON_ENV,
    STAGES,
    StageConfig,
    config_path,
    default_episodes_dir,
    load_stage,
    stage_config_file,
    stage_package,
)
from searchrl.stage.openrlhf_flags import render_flags, validated_args
from searchrl.stage.templates import effective_model

# Flags whose values are paths on the submitting machine: made absolute so every Ray worker, whose
# working directory is the uploaded copy of the code, reads the same files (shared storage on a cluster).
PATH_FLAGS = ("data.prompt_dataset", "ckpt.output_dir", "ckpt.path", "logger.tensorboard_dir", "eval.dataset")
# What the job imports (the agent file and the packages behind it) and the configs; everything else in
# the repository root (indexes, corpora, checkpoints, runs/) stays home.
UPLOAD = (
    "searchrl",
    "search_backend",
    "reward_server",
    "eval",
    "stage1_format",
    "stage2_answer",
    "stage_router_r1",
    "configs",
    "pyproject.toml",
)
# Packages of ours that only the submitting machine runs: submission, data preparation, the tiny policy and the
# CPU rehearsal. A job's workers never import them, so a real job does not carry them (the rehearsal adds back
# what its own job runs: searchrl/rehearsal/cpu_layer.py).
HOME_ONLY = ("/searchrl/job", "/searchrl/qa_data", "/searchrl/rehearsal", "/searchrl/tiny_policy")
ALWAYS_EXCLUDED = ["__pycache__", "*.pyc", "/configs/resolved", *HOME_ONLY]
# Set on the submitting shell, needed on the workers (which inherit `ray start`'s environment, not ours).
ALWAYS_FORWARDED = ("WANDB_API_KEY", "HF_TOKEN")
# Flags whose values are secrets: the value travels in an env var and the command names the variable.
SECRET_FLAGS = {"logger.wandb.key": "WANDB_API_KEY"}
MASK = "***"


def absolute(value: Any) -> Any:
    return str((ROOT / value).resolve()) if isinstance(value, str) and not Path(value).is_absolute() else value


def previous_stage(stage: StageConfig, stage_file: Path) -> tuple[StageConfig, Path] | None:
    """The stage named by `init_from`, whose final checkpoint and logs this stage builds on."""
    if not stage.init_from:
        return None
    source = config_path(stage_file, stage.init_from) or stage_file.parent / stage.init_from
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
        return absolute(out), f"final checkpoint of {previous.stage} ({source})"
    return model_path, "model config"


def with_episodes_dir(stage: StageConfig) -> StageConfig:
    """The stage with its episodes' folder absolute (`episodes.dir`, else beside its TensorBoard folder): the agent
    runs in the job's uploaded copy of the code, where a relative path would land in Ray's temp folder, not beside
    the run's curves. No folder when none are kept, or when the flags name no folder of the run."""
    where = stage.episodes.dir or default_episodes_dir(stage.openrlhf)
    if not stage.episodes.per_step or where is None:
        return stage
    return stage.model_copy(update={"episodes": stage.episodes.model_copy(update={"dir": absolute(where)})})


def plan_stage(stage_name: str, model: str | None, overrides: list[str]) -> dict[str, Any]:
    """The stage, its model, the starting policy and the rendered OpenRLHF flags."""
    stage_file = stage_config_file(stage_name)
    overrides = ([f"model={model}"] if model else []) + overrides
    stage, model_cfg = load_stage(stage_file, overrides)
    model_cfg = effective_model(model_cfg, stage)
    policy, policy_source = starting_policy(stage, stage_file, model_cfg.model_path)
    stage = with_episodes_dir(stage)
    flags = {name: absolute(v) if name in PATH_FLAGS else v for name, v in stage.openrlhf.items()}
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
        "resolved_path": CONFIGS / "resolved" / f"{STAGES[stage_name]}.json",
    }


def secret_names(stage: StageConfig) -> list[str]:
    """Environment variables holding what the workers need to authenticate: the servers' tokens,
    the search provider's and summariser's keys, the router's endpoint keys, W&B and HF tokens."""
    names = [stage.reward_server.token_env, *stage.search.kind.secret_envs(stage.search), *ALWAYS_FORWARDED]
    return [n for n in dict.fromkeys(names) if n]


def excludes(root: Path = ROOT) -> list[str]:
    """Ray `excludes` (gitignore patterns) naming every top-level entry outside UPLOAD, and the packages of ours
    that stay home. Listed by name because a catch-all `/*` would also match the working_dir itself in Ray's walk."""
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
