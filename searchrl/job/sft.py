"""The SFT stage: `searchrl stage submit sft`, OpenRLHF's own `train_sft` on trajectories in the protocol, the
retrieved documents masked from the loss as in RL.

`train_sft` is a torchrun job (DeepSpeed ranks), not a Ray one: the submit runs `ray job submit --
torchrun --nproc_per_node N -m openrlhf.cli.train_sft FLAGS` with the same upload and excludes as the RL
stages, so it runs where they run. `searchrl stage rehearse sft` runs the same module on CPU, one rank
(searchrl/rehearsal/sft.py).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from searchrl.config import ConfigError, load
from searchrl.job.plan import absolute, excludes
from searchrl.paths import CONFIGS, ROOT
from searchrl.process import own_tool
from searchrl.stage.config import FlagValue, ModelConfig, Strict, flag_names_without_dashes, resolve_model_path
from searchrl.stage.openrlhf_flags import _source_path, render_flags, validated_args

SFT_CONFIG = CONFIGS / "stages/sft.yaml"
ENTRY = "openrlhf.cli.train_sft"
PATH_FLAGS = ("data.dataset", "ckpt.output_dir", "ckpt.path", "logger.tensorboard_dir", "eval.dataset")


class SftConfig(Strict):
    stage: Literal["sft"]
    model: str = Field(description="path of a configs/models/*.yaml file (its model_path is the policy)")
    nproc_per_node: int = Field(8, ge=1, description="GPUs per node: torchrun's --nproc_per_node")
    openrlhf: dict[str, FlagValue] = Field(default_factory=dict, description="train_sft flags, without `--`")

    @field_validator("openrlhf")
    @classmethod
    def _flag_names(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        return flag_names_without_dashes(flags)


@cache
def train_sft_source() -> str:
    return str(_source_path().with_name("train_sft.py"))


def plan_sft(overrides: list[str], config: Path = SFT_CONFIG) -> dict[str, Any]:
    """The SFT stage's flags, rendered and checked by OpenRLHF's own train_sft parser and checks."""
    stage = load(SftConfig, config, overrides)
    model = load(ModelConfig, resolve_model_path(config, stage.model))
    flags = {name: absolute(v) if name in PATH_FLAGS else v for name, v in stage.openrlhf.items()}
    flags.setdefault("model.model_name_or_path", model.model_path)
    args = render_flags(flags, train_sft_source())
    validated_args(args, train_sft_source())
    return {"stage": stage, "model": model, "flags": flags, "train_args": args}


def torchrun(nproc: int, module: list[str]) -> list[str]:
    return ["torchrun", "--standalone", f"--nproc_per_node={nproc}", "-m", *module]


def submit(overrides: list[str], address: str | None, dry_run: bool) -> int:
    try:
        plan = plan_sft(overrides)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = {"working_dir": str(ROOT), "excludes": excludes(), "env_vars": {}}
    cmd = ["ray", "job", "submit", *(["--address", address] if address else []), "--runtime-env-json", json.dumps(env)]
    cmd += ["--", *torchrun(plan["stage"].nproc_per_node, [ENTRY, *plan["train_args"]])]
    print(shlex.join(cmd))
    if dry_run:
        return 0
    dataset = Path(str(plan["flags"]["data.dataset"]))
    if not dataset.is_file():
        print(
            f"error: data.dataset: {dataset}: no such file (write it with `searchrl data prepare sft`)",
            file=sys.stderr,
        )
        return 1
    ray = own_tool("ray")
    if ray is None:
        print(
            f"error: ray CLI: neither beside {sys.executable} nor on PATH: install the `train` extra "
            "(bash launch/install_gpu.sh)",
            file=sys.stderr,
        )
        return 3
    return subprocess.run([ray, *cmd[1:]], cwd=ROOT).returncode
