"""The SFT stage: `searchrl stage submit|rehearse sft`, OpenRLHF's own `train_sft` on trajectories in the
protocol, the retrieved documents masked from the loss as in RL.

`train_sft` is a torchrun job (DeepSpeed ranks), not a Ray one: the submit runs `ray job submit --
torchrun --nproc_per_node N -m openrlhf.cli.train_sft FLAGS` with the same upload and excludes as the RL
stages, so it runs where they run. The rehearsal runs the same module on CPU, one rank, through
`searchrl.rehearsal.cpu.launch` (its CPU overrides applied after train_sft's checks).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from searchrl.config import ConfigError, load
from searchrl.paths import ROOT
from searchrl.protocol import ANSWER_CLOSE, BEGIN_DOCS, END_DOCS
from searchrl.stage.config import FlagValue, Strict, flag_names_without_dashes
from searchrl.stage.openrlhf_flags import _source_path, render_flags, validated_args

SFT_CONFIG = ROOT / "configs/stages/sft.yaml"
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


def _absolute(value: Any) -> Any:
    return str((ROOT / value).resolve()) if isinstance(value, str) and not Path(value).is_absolute() else value


def resolve(overrides: list[str], config: Path = SFT_CONFIG) -> dict[str, Any]:
    """The SFT stage's flags, rendered and checked by OpenRLHF's own train_sft parser and checks."""
    from searchrl.stage.config import ModelConfig, resolve_model_path

    stage = load(SftConfig, config, overrides)
    model = load(ModelConfig, resolve_model_path(config, stage.model))
    flags = {name: _absolute(v) if name in PATH_FLAGS else v for name, v in stage.openrlhf.items()}
    flags.setdefault("model.model_name_or_path", model.model_path)
    args = render_flags(flags, train_sft_source())
    validated_args(args, train_sft_source())
    return {"stage": stage, "model": model, "flags": flags, "train_args": args}


def torchrun(nproc: int, module: list[str]) -> list[str]:
    return ["torchrun", "--standalone", f"--nproc_per_node={nproc}", "-m", *module]


def submit(overrides: list[str], address: str | None, dry_run: bool) -> int:
    from searchrl.job.submit import excludes

    try:
        plan = resolve(overrides)
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
    return subprocess.run(cmd, cwd=ROOT).returncode


def cpu_overrides(lr: float, epochs: int, batch: int) -> list[Any]:
    from searchrl.rehearsal.cpu_layer import Override

    return [
        Override("ds.attn_implementation", "sdpa", "flash-attention kernels need a GPU: torch SDPA, packed masks"),
        Override("train.batch_size", batch, "CPU time: a small dataset in a few optimizer steps an epoch"),
        Override("train.micro_batch_size", min(batch, 8), "one rank holds the whole batch"),
        Override("train.max_epochs", epochs, "a tiny random-init policy needs more passes than a 7B model"),
        Override("adam.lr", lr, "a tiny random-init policy moves only with a larger step"),
    ]


def rehearse(
    dataset: Path,
    pretrain: Path,
    out: Path,
    overrides: Sequence[str] = (),
    lr: float = 2e-3,
    epochs: int = 6,
    batch: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """The SFT stage as its job runs, on CPU: `ray job submit` -- torchrun (one rank) -- train_sft. Returns
    where the model was saved and the run's figures; raises RuntimeError when the job fails."""
    from searchrl.job.submit import excludes
    from searchrl.rehearsal.cpu_layer import runtime_env_with_cpu_layer
    from searchrl.rehearsal.episodes import RayHead

    out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_overrides(lr, epochs, batch)
    local = {
        "data.dataset": str(dataset),
        "model.model_name_or_path": str(pretrain),
        "ckpt.output_dir": str(out / "final"),
        "ckpt.path": str(out / "ckpt"),
        "logger.tensorboard_dir": str(out / "tensorboard"),
        "train.seed": seed,
        **{o.flag: o.value for o in cpu},
    }
    plan = resolve([*overrides, *(f"openrlhf.{k}={json.dumps(v)}" for k, v in local.items())])
    env = runtime_env_with_cpu_layer({"working_dir": str(ROOT), "excludes": excludes(), "env_vars": {}}, cpu, None)
    for o in cpu:
        print(f"[cpu override] {o.flag}={o.value!r}: {o.reason}", flush=True)
    head = RayHead(out, num_cpus=2, num_gpus=0)
    log = out / "job.log"
    t0 = time.monotonic()
    try:
        head.wait()
        ray = str(Path(sys.executable).parent / "ray")
        entry = torchrun(1, ["searchrl.rehearsal.cpu.launch", ENTRY, *plan["train_args"]])
        cmd = [ray, "job", "submit", "--address", head.address, "--runtime-env-json", json.dumps(env), "--", *entry]
        with log.open("w", encoding="utf-8") as f:
            done = subprocess.run(cmd, cwd=ROOT, env=head.env, stdout=f, stderr=subprocess.STDOUT)
    finally:
        head.stop()
    final = out / "final"
    if done.returncode != 0 or not (final / "config.json").is_file():
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:])
        raise RuntimeError(f"the SFT job failed (exit {done.returncode}); see {log}\n{tail}")
    return {
        "entry": ENTRY,
        "hf_checkpoint": str(final),
        "overrides": [asdict(o) for o in cpu],
        "seconds": round(time.monotonic() - t0, 1),
    }


def trajectory_messages(prompt: str, solution: str, eos: str) -> list[dict[str, str]]:
    """A trajectory in the protocol as OpenRLHF SFT messages: each documents block (with the newlines
    after it) is a `tool` turn, kept out of the loss; the policy's text between blocks is `assistant`
    turns. The newlines a policy writes before a block stay with it, as they do in a rollout (a Qwen
    token merges them with `|>`). The last turn ends with `eos` when the trajectory ended with an answer."""
    messages = [{"role": "user", "content": prompt}]
    rest = solution
    while BEGIN_DOCS in rest:
        head, tail = rest.split(BEGIN_DOCS, 1)
        if END_DOCS not in tail:
            break
        body, rest = tail.split(END_DOCS, 1)
        after = len(rest) - len(rest.lstrip("\n"))
        messages.append({"role": "assistant", "content": head})
        messages.append({"role": "tool", "content": BEGIN_DOCS + body + END_DOCS + rest[:after]})
        rest = rest[after:]
    ended = ANSWER_CLOSE in rest
    messages.append({"role": "assistant", "content": rest.rstrip() + eos if ended else rest})
    return [m for m in messages if m["content"]]


def prepare_main(argv: list[str] | None = None) -> int:
    """`searchrl data prepare sft`: trajectories in the protocol -> OpenRLHF's multi-turn SFT dataset."""
    import argparse

    from searchrl.jsonl import RecordError, read_jsonl
    from searchrl.stage.config import ModelConfig
    from searchrl.stage.templates import load_tokenizer, render_prompt

    p = argparse.ArgumentParser(prog="searchrl data prepare sft", description=prepare_main.__doc__.split(": ", 1)[1])
    p.add_argument("--input", required=True, help="JSONL: R1-Searcher's released trajectories (question, "
                   "gen_text_store) or yours (prompt or question, solution)")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="the dataset to write (JSONL, a `messages` list a line)")
    p.add_argument("--model", default=str(ROOT / "configs/models/qwen2.5-7b-base.yaml"), help="its template renders "
                   "the prompt from `question`; its tokenizer gives the EOS the last turn ends with")  # fmt: skip
    p.add_argument("--eos", default=None, help="the EOS text (default: the model tokenizer's)")
    args = p.parse_args(argv)
    try:
        model = load(ModelConfig, args.model)
        eos = args.eos
        tokenizer = None
        if eos is None or model.kind == "chat":
            tokenizer = load_tokenizer(model)
            eos = eos if eos is not None else tokenizer.eos_token
        rows = []
        for i, r in enumerate(read_jsonl(args.input), start=1):
            solution = r.get("gen_text_store", r.get("solution"))
            if not isinstance(solution, str):
                raise RecordError(f"{args.input}: record {i}: needs `gen_text_store` or `solution` (a string)")
            prompt = r.get("prompt") or render_prompt(model, r.get("question", ""), tokenizer)
            if not prompt or not (r.get("prompt") or r.get("question")):
                raise RecordError(f"{args.input}: record {i}: needs `prompt` or `question`")
            rows.append({"messages": trajectory_messages(prompt, solution, eos), "label": r.get("answer")})
    except (ConfigError, RecordError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(json.dumps({"out": str(args.out), "trajectories": len(rows), "model": model.name, "eos": eos}))
    return 0


def rehearse_main(overrides: list[str], seed: int) -> int:
    """`searchrl stage rehearse sft`: the SFT stage on CPU, as the tiny policy's warm start (rebuilt)."""
    from searchrl.rehearsal import training as train_rehearsal
    from searchrl.tiny_policy import warm_start

    if overrides:
        print(f"error: the SFT rehearsal takes no overrides (got {overrides})", file=sys.stderr)
        return 2
    try:
        path = warm_start.ensure(train_rehearsal.build_index(), seed=seed, force=True)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(json.loads((path.parent / "warm_start.json").read_text(encoding="utf-8"))))
    return 0
