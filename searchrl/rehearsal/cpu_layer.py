"""The rehearsal's side of the CPU layer (`searchrl/rehearsal/cpu/`): the flags a CPU cannot honour, each with its
reason, and the runtime_env additions that ship the layer to a rehearsal job and to no other job.

A real submit's runtime_env is `searchrl.job.plan.runtime_env`; a rehearsal adds to it, here, exactly the
rehearsal's own code in the upload (`searchrl/rehearsal/`, the layer included, and `searchrl/tiny_policy/`),
`py_modules` (the layer's `vllm` / `flash_attn` stand-ins, importable under their own names),
`worker_process_setup_hook` (the CUDA shims in every Ray worker) and the env vars naming the overrides and the
weight-sync log.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from searchrl.paths import ROOT

CPU_LAYER = ROOT / "searchrl/rehearsal/cpu"
SYNC_LOG_ENV = "SEARCHRL_CPU_SYNC_LOG"
OVERRIDES_ENV = "SEARCHRL_CPU_OVERRIDES"
SETUP_HOOK = "searchrl.rehearsal.cpu.activate"
# The packages a rehearsal's job imports beyond a real job's upload (searchrl/job/plan.py HOME_ONLY).
REHEARSAL_CODE = ("/searchrl/rehearsal", "/searchrl/tiny_policy")


@dataclass(frozen=True)
class Override:
    flag: str
    value: Any
    reason: str


def cpu_overrides(flags: dict[str, Any], lr: float) -> list[Override]:
    """What a CPU cannot do as the stage asks, with the reason. Sizes keep the stage's ratios: the
    stage's 64 prompts x 16 samples over train batches of 256 (4 optimizer steps a rollout step)
    become 8 x 8 over batches of 16; Search-R1's 512 x 5 over batches of 256 (10 steps) become 8 x 5 over 4."""
    prompts = 8
    samples = min(8, int(flags.get("rollout.n_samples_per_prompt", 16)))
    ratio = int(flags.get("rollout.batch_size", 64)) * int(flags.get("rollout.n_samples_per_prompt", 16))
    per_rollout = max(1, ratio // int(flags.get("train.batch_size", 256)))
    return [
        Override("ds.attn_implementation", "sdpa", "flash-attention kernels need a GPU: torch SDPA, packed masks"),
        Override("vllm.sync_backend", "gloo", "NCCL needs GPUs: the weight broadcast to the engines runs over gloo"),
        Override("actor.num_gpus_per_node", 1, "one DeepSpeed rank (a logical GPU) on a 2-core machine"),
        Override("ref.num_gpus_per_node", 1, "as the actor"),
        Override("vllm.num_engines", 1, "one engine beside the one actor rank (on its logical GPU when colocated)"),
        Override("vllm.tensor_parallel_size", 1, "the CPU stand-in runs one engine per process"),
        Override("rollout.n_samples_per_prompt", samples, "CPU time (at most 8 a prompt; 16 on GPUs by default)"),
        Override("rollout.batch_size", prompts, "CPU time (64 prompts a step on GPUs)"),
        Override(
            "train.batch_size",
            max(1, samples * prompts // per_rollout),
            f"keeps the stage's {per_rollout} optimizer steps per rollout step",
        ),
        Override("actor.adam.lr", lr, "a tiny random-init policy moves in a few steps only with a larger step"),
    ]


def with_rehearsal_code(env: dict[str, Any]) -> dict[str, Any]:
    """A real submit's runtime_env with the rehearsal's own code uploaded too: a real job leaves
    searchrl/rehearsal and searchrl/tiny_policy home (`HOME_ONLY`), a rehearsal's job runs them."""
    return {**env, "excludes": [e for e in env["excludes"] if e not in REHEARSAL_CODE]}


def runtime_env_with_cpu_layer(
    env: dict[str, Any], overrides: list[Override], sync_log: Path | None
) -> dict[str, Any]:
    """The real submit's runtime_env plus the CPU layer: its packages as `py_modules` (the `vllm` and
    `flash_attn` stand-ins importable under their own names), the CUDA shims in every worker, the overrides.
    No env var that OpenRLHF's own `ray.init` sets (TOKENIZERS_PARALLELISM, NCCL_DEBUG, ...): Ray refuses a
    job whose env_vars name one of them."""
    cpu = {
        "py_modules": [str(CPU_LAYER / "stubs/vllm"), str(CPU_LAYER / "stubs/flash_attn")],
        "worker_process_setup_hook": SETUP_HOOK,
    }
    env_vars = {
        **env["env_vars"],
        OVERRIDES_ENV: json.dumps([asdict(o) for o in overrides]),
    }
    if sync_log is not None:
        env_vars[SYNC_LOG_ENV] = str(sync_log)
    return {**with_rehearsal_code(env), **cpu, "env_vars": env_vars}
