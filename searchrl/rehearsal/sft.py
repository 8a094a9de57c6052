"""The SFT stage on CPU, as its job runs: `ray job submit` -- torchrun (one rank) -- OpenRLHF's own `train_sft`,
through `searchrl.rehearsal.cpu.launch` (its CPU overrides applied after train_sft's checks). `rehearse` runs it
for a few steps from the tiny policy's warm start on the warm-start mixture, as a user fine-tunes a base model on
trajectories before RL (the warm start itself is built in plain PyTorch: searchrl/tiny_policy/build.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from searchrl.job.plan import excludes
from searchrl.job.sft import ENTRY, plan_sft, torchrun
from searchrl.paths import ROOT, RUNS
from searchrl.rehearsal.cpu_layer import Override, runtime_env_with_cpu_layer
from searchrl.rehearsal.inputs import passage_retriever
from searchrl.rehearsal.ray_head import open_head
from searchrl.rehearsal.warm_start import base_template
from searchrl.tiny_policy.mixture import build, fictional_questions, real_questions


def sft_cpu_overrides(lr: float, epochs: int, batch: int) -> list[Override]:
    return [
        Override("ds.attn_implementation", "sdpa", "flash-attention kernels need a GPU: torch SDPA, packed masks"),
        Override("train.batch_size", batch, "CPU time: a small dataset in a few optimizer steps an epoch"),
        Override("train.micro_batch_size", min(batch, 8), "one rank holds the whole batch"),
        Override("train.max_epochs", epochs, "CPU time: passes over the rehearsal's trajectories"),
        Override("adam.lr", lr, "the tiny policy's scale (a 7B policy: the stage's own lr)"),
    ]


def run_sft(
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
    out.mkdir(parents=True, exist_ok=True)
    cpu = sft_cpu_overrides(lr, epochs, batch)
    local = {
        "data.dataset": str(dataset),
        "model.model_name_or_path": str(pretrain),
        "ckpt.output_dir": str(out / "final"),
        "ckpt.path": str(out / "ckpt"),
        "logger.tensorboard_dir": str(out / "tensorboard"),
        "train.seed": seed,
        **{o.flag: o.value for o in cpu},
    }
    plan = plan_sft([*overrides, *(f"openrlhf.{k}={json.dumps(v)}" for k, v in local.items())])
    env = runtime_env_with_cpu_layer({"working_dir": str(ROOT), "excludes": excludes(), "env_vars": {}}, cpu, None)
    for o in cpu:
        print(f"[cpu override] {o.flag}={o.value!r}: {o.reason}", flush=True)
    head = open_head(out, num_cpus=2, num_gpus=0)
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


def sft_rows(index: Path, seed: int = 0, count: int = 64) -> list[dict]:
    """`count` mixture trajectories, half real questions and half training people, documents from `index`."""
    template, retrieve = base_template(), passage_retriever(index)
    rng = random.Random(seed)
    render = lambda q: template.replace("{question}", q)  # noqa: E731
    real = rng.sample(real_questions(), count // 2)
    people = rng.sample(fictional_questions(), count - count // 2)
    return build(real, render, retrieve, "</s>", seed=seed) + build(people, render, retrieve, "</s>", seed=seed + 1)


def rehearse(index: Path, pretrain: Path, seed: int = 0, count: int = 64, out: Path = RUNS / "rehearse/sft") -> dict:
    """`count` mixture trajectories (half real questions, half fictional people) with their documents from the
    rehearsal index, one epoch of train_sft on them from `pretrain`; returns run_sft's record and the data's."""
    rows = sft_rows(index, seed, count)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = run_sft(data, pretrain, out, lr=1e-4, epochs=1, batch=8, seed=seed)
    return {**result, "pretrain": str(pretrain), "data": str(data), "trajectories": len(rows)}
