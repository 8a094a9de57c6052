"""One reader for every run folder: the episode records under it, each given its trainer step, and its
TensorBoard curves.

The agent cannot know the trainer's step (OpenRLHF passes none to the engines), so a record written without one
is given the first step the trainer logged after the episode ended: in the synchronous schedule each step's
rollouts end before the step is logged, so this is exact; under the async schedule an episode can land one step
early. A record past the last logged step belongs to the step in progress.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from searchrl.episodes.record import EpisodeRecord

EPISODES_DIR = "episodes"


@dataclass
class RunEpisodes:
    run_dir: Path
    episodes: list[EpisodeRecord]
    # TensorBoard scalars by their last name segment: (step, value) in step order; empty without event files.
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    # When the trainer logged each step (the latest wall time of its scalars).
    step_times: dict[int, float] = field(default_factory=dict)
    # Lines that were not records (a torn last line of a live run, a file of another shape), by file.
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def steps(self) -> list[int]:
        return sorted({e.step for e in self.episodes if e.step is not None})


def episode_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*.jsonl") if EPISODES_DIR in p.relative_to(run_dir).parts[:-1])


def read_records(files: list[Path], skipped: dict[str, int]) -> list[EpisodeRecord]:
    records = []
    for path in files:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    records.append(EpisodeRecord.model_validate(json.loads(line)))
                except (ValueError, ValidationError):
                    skipped[str(path)] = skipped.get(str(path), 0) + 1
    return records


def read_scalars(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[int, float]]:
    files = sorted(run_dir.rglob("events.out.tfevents.*"))
    if not files:
        return {}, {}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    curves: dict[str, dict[int, float]] = {}
    times: dict[int, float] = {}
    for file in files:
        acc = EventAccumulator(str(file), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            name = tag.rsplit("/", 1)[-1]
            for e in acc.Scalars(tag):
                curves.setdefault(name, {})[e.step] = e.value
                times[e.step] = max(times.get(e.step, 0.0), e.wall_time)
    return {name: sorted(points.items()) for name, points in curves.items()}, times


def assign_steps(records: list[EpisodeRecord], step_times: dict[int, float]) -> None:
    """Gives each record without a step the first step logged at or after its end (see the module's docstring);
    without step times an evaluation's records are step 0 and a training run's stay unassigned as step 1."""
    steps = sorted(step_times)
    ends = [step_times[s] for s in steps]
    for r in records:
        if r.step is not None:
            continue
        if not steps:
            r.step = 0 if r.source == "eval" else 1
            continue
        at = bisect.bisect_left(ends, r.time)
        r.step = steps[at] if at < len(steps) else steps[-1] + 1


def read_run(run_dir: Path) -> RunEpisodes:
    """The episodes under `run_dir` (any `episodes/` folder below it) with their steps, and its curves."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such folder (give a run's folder, e.g. runs/stage1_format)")
    skipped: dict[str, int] = {}
    records = read_records(episode_files(run_dir), skipped)
    curves, step_times = read_scalars(run_dir)
    assign_steps(records, step_times)
    records.sort(key=lambda r: (r.step or 0, r.time))
    return RunEpisodes(run_dir, records, curves, step_times, skipped)
