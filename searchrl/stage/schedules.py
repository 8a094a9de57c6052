"""Rollout schedules by name: how generation and training take turns, as OpenRLHF 0.11.2 flag sets a stage picks
with `schedule:`. Merged under the stage's own `openrlhf:` flags as an algorithm's are, but for `FORCED`.

- `sync` (the default): OpenRLHF's PPOTrainer; each step generates a batch, then trains on it; all models may
  share the GPUs (`train.colocate_all`, sleep modes).
- `async`: OpenRLHF's PPOTrainerAsync; the next batch is generated while the trainer trains on the last one, so
  a batch is at most `train.async_queue_size` (1) weight versions old. Its off-policy gap is corrected by
  OpenRLHF's importance-sampling correction against the engines' own log-probs: token level, tokens whose
  train/rollout probability ratio leaves [0.5, 5] are masked out of the loss (OpenRLHF's default mode, gating
  and bounds; its default level is off).
- `async-partial`: as `async`, and a weight sync pauses the engines mid-episode instead of waiting for the batch
  to finish (OpenRLHF's partial rollout); an episode may then hold tokens of two weight versions, which is what
  the token-level correction is for.
"""

from __future__ import annotations

import argparse

from searchrl.stage.algorithms import FlagValue

_CORRECTED: dict[str, FlagValue] = {
    "train.async_enable": True,
    "train.async_queue_size": 1,
    "algo.advantage.is_correction_level": "token",
    "algo.advantage.is_correction_mode": "mask",
    "algo.advantage.is_correction_gating": "ratio",
    "algo.advantage.is_correction_threshold": [0.5, 5.0],
}
SCHEDULES: dict[str, dict[str, FlagValue]] = {
    "sync": {},
    "async": _CORRECTED,
    "async-partial": {**_CORRECTED, "train.partial_rollout_enable": True},
}
# Set over the stage's flags: the stage files sleep the colocated engines between rollouts, which OpenRLHF
# refuses under async (the engines generate while the actor trains, so they never sleep).
FORCED: dict[str, dict[str, FlagValue]] = {
    "sync": {},
    "async": {"vllm.enable_sleep": False},
    "async-partial": {"vllm.enable_sleep": False},
}


def gpus_needed(flags: dict[str, FlagValue]) -> int:
    """GPUs the flags ask for. Colocated sync runs share the actor's GPUs with everything; under async the
    DeepSpeed models still share theirs (OpenRLHF: colocate_all then colocates only them), and the engines,
    which generate while the actor trains, need their own."""

    def count(role: str) -> int:
        return int(flags.get(f"{role}.num_nodes", 1) or 1) * int(flags.get(f"{role}.num_gpus_per_node", 8) or 8)

    engines = int(flags.get("vllm.num_engines", 0) or 0) * int(flags.get("vllm.tensor_parallel_size", 1) or 1)
    if flags.get("train.colocate_all"):
        return count("actor") + (engines if flags.get("train.async_enable") else 0)
    return count("actor") + count("ref") + engines


def add_schedule_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group('rollout schedule (docs/TRAINING.md, "Async training")')
    g.add_argument(
        "--async",
        dest="schedule",
        action="store_const",
        const="async",
        help="schedule=async: OpenRLHF's async trainer, the next batch generated while the last one trains, with "
        "its token-level off-policy correction",
    )
    g.add_argument(
        "--partial-rollout",
        dest="schedule",
        action="store_const",
        const="async-partial",
        help="schedule=async-partial: --async, and weight syncs pause the engines mid-episode",
    )


def schedule_overrides(args: argparse.Namespace) -> list[str]:
    return [f"schedule={args.schedule}"] if getattr(args, "schedule", None) else []
