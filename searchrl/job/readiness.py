"""The stage switch: whether the stage a stage starts from (`init_from`) has learnt enough, read from its logged
format pass rate and search rate, and whether its final checkpoint is written (`--when-ready`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError
from searchrl.curves import read_curves
from searchrl.job.plan import absolute
from searchrl.stage.config import StageConfig


def readiness(previous: StageConfig, min_format: float, min_search: float, window: int) -> dict[str, Any]:
    """Whether the previous stage's logged format pass rate and search rate (means over its last
    `window` steps) have crossed the thresholds."""
    logdir = previous.openrlhf.get("logger.tensorboard_dir")
    if not logdir:
        raise ConfigError(f"{previous.stage}: openrlhf.logger.tensorboard_dir: needed to read its progress")
    try:
        curves = read_curves(Path(absolute(logdir)))
    except FileNotFoundError:
        return {"ready": False, "logdir": absolute(logdir), "reason": "no logs yet"}
    means = {}
    for name in ("format_ok", "searched"):
        values = [v for _, v in curves.get(name, [])][-window:]
        means[name] = sum(values) / len(values) if values else 0.0
    step = max((s for points in curves.values() for s, _ in points), default=0)
    ready = means["format_ok"] >= min_format and means["searched"] >= min_search
    return {
        "ready": ready,
        "logdir": absolute(logdir),
        "step": step,
        **means,
        "thresholds": {"format_ok": min_format, "searched": min_search, "window": window},
    }


def wait_until_ready(
    previous: StageConfig, checkpoint: str, args: argparse.Namespace, once: bool = False
) -> dict[str, Any]:
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
        if status["ready"] or once or time.monotonic() + args.poll_s > deadline:
            return status
        time.sleep(args.poll_s)
