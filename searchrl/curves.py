"""Training curves read back from OpenRLHF's TensorBoard event files."""

from __future__ import annotations

from pathlib import Path


def read_curves(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar under `logdir` (all event files, all runs), keyed by its last name segment."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    curves: dict[str, dict[int, float]] = {}
    files = sorted(logdir.rglob("events.out.tfevents.*"))
    if not files:
        raise FileNotFoundError(f"{logdir}: no TensorBoard event files (give --logger.tensorboard_dir's folder)")
    for file in files:
        acc = EventAccumulator(str(file), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            name = tag.rsplit("/", 1)[-1]
            curves.setdefault(name, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return {name: sorted(points.items()) for name, points in curves.items()}
