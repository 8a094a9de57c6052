"""`searchrl stage rehearse STAGE [--train] [key=value ...]`: a stage's job as Ray runs it, on CPU, and its checks.

Without `--train`, the rollout half of a step (searchrl/rehearsal/episodes.py): recorded policies through
OpenRLHF's own rollout and experience code. With `--train`, both halves (searchrl/rehearsal/training.py):
OpenRLHF's own `train_ppo_ray` with the tiny policy. `sft`: the SFT stage (OpenRLHF's own `train_sft`) for
a few steps from the tiny policy's warm start. Each prints a table and, last, one JSON line.
`launch/ray_submit.sh STAGE --rehearse ...` is the same.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from searchrl.process import exit_on_sigterm
from searchrl.rehearsal import episodes, sft, training
from searchrl.rehearsal.inputs import rehearsal_index
from searchrl.rehearsal.warm_start import WarmStartError
from searchrl.rehearsal.warm_start import ensure as ensure_warm_start
from searchrl.stage.config import STAGES
from searchrl.stage.schedules import add_schedule_flags, schedule_overrides


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="searchrl stage rehearse", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument(
        "stage",
        choices=[*sorted(STAGES), "sft"],
        help="stage1, stage2, router_r1 or rag_r1: the stage's job; sft: the SFT stage, as the tiny policy's warm "
        "start (rebuilt)",
    )
    p.add_argument("--model", default=None, help="a configs/models/*.yaml file (default: the stage config's)")
    p.add_argument("--episodes", type=int, default=8, help="the rollout half: prompts to run (default 8)")
    train = p.add_argument_group("training (--train: stage1 and stage2)")
    train.add_argument(
        "--train",
        action="store_true",
        help="run OpenRLHF's own train_ppo_ray (both halves of a step: rollout and training) with a tiny policy "
        "on CPU; prints a per-step table and, last, one JSON line",
    )
    train.add_argument("--steps", type=int, default=2, help="rollout steps (default 2)")
    train.add_argument("--no-resume", action="store_true", help="skip the resume-from-checkpoint run")
    train.add_argument(
        "--crash-after-step",
        type=int,
        default=None,
        metavar="K",
        help="the crash check instead of the resume check: kill -9 the job mid-step K+1, resubmit, and require it "
        "to finish from its last checkpoint with no step logged twice",
    )
    train.add_argument("--out", type=Path, default=None, help="folder (default runs/rehearse/train)")
    train.add_argument("--pretrain", type=Path, default=None, help="start from this HF folder instead")
    train.add_argument(
        "--lr", type=float, default=None, help=f"the tiny policy's learning rate ({training.DEFAULT_LR})"
    )
    train.add_argument(
        "--seed", type=int, default=0, help="seed of the run (sft too); the warm start is the shipped one"
    )
    train.add_argument(
        "--search-latency-s",
        type=float,
        default=0.0,
        help="seconds the rehearsal's retrieval server adds to each search (a web provider takes 0.5-3 s)",
    )
    add_schedule_flags(p)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. episode.top_k=5")
    return p


def rehearse_sft(overrides: list[str], seed: int) -> int:
    """OpenRLHF's own SFT stage on CPU: a few steps from the tiny policy's warm start on its mixture."""
    if overrides:
        print(f"error: the SFT rehearsal takes no overrides (got {overrides})", file=sys.stderr)
        return 2
    try:
        index = rehearsal_index()
        result = sft.rehearse(index, ensure_warm_start(), seed=seed)
    except (RuntimeError, WarmStartError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    args.overrides = [*schedule_overrides(args), *args.overrides]
    exit_on_sigterm()
    if args.stage == "sft":
        return rehearse_sft(args.overrides, args.seed)
    if args.train:
        return training.main(
            args.stage,
            args.model,
            args.overrides,
            args.steps,
            resume=not args.no_resume,
            out=args.out,
            pretrain=args.pretrain,
            lr=args.lr if args.lr is not None else training.DEFAULT_LR,
            seed=args.seed,
            search_latency_s=args.search_latency_s,
            crash_after_step=args.crash_after_step,
        )
    return episodes.run(args.stage, args.model, args.overrides, args.episodes)


if __name__ == "__main__":
    sys.exit(main())
