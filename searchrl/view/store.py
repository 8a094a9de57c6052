"""A run folder read once, then again only where it changed: a live run is polled every few seconds, and a refresh
that finds every file's size and modification time where they were costs a few `stat` calls.

An episodes file that changed is parsed again on its own; the TensorBoard files are read again when any of them
changed (the reader assigns steps from all of them at once). A file is stat'ed before it is read, so one that grows
while it is read is read again on the next check.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from searchrl.episodes.reader import RunEpisodes, assign_steps, episode_files, read_records, read_scalars
from searchrl.episodes.record import EpisodeRecord
from searchrl.view.summary import RunSummary, StepSummary, summarize

FileKey = tuple[int, int]  # (st_mtime_ns, st_size)
EVENTS_GLOB = "events.out.tfevents.*"


@dataclass
class Snapshot:
    """The run as of one check: every record with its step, the summary, and what the API looks up."""

    run: RunEpisodes
    summary: RunSummary
    by_id: dict[str, EpisodeRecord]
    by_step: dict[int, StepSummary]
    checked_at: float = field(default_factory=time.time)

    @property
    def episodes(self) -> list[EpisodeRecord]:
        return self.run.episodes

    @property
    def version(self) -> str:
        return self.summary.version


@dataclass
class _Parsed:
    key: FileKey
    records: list[EpisodeRecord]
    skipped: int


def _stat(paths: Sequence[Path]) -> dict[Path, FileKey]:
    keys = {}
    for path in paths:
        try:
            st = path.stat()
        except OSError:  # removed since the listing
            continue
        keys[path] = (st.st_mtime_ns, st.st_size)
    return keys


def _version(*keyed: dict[Path, FileKey]) -> str:
    digest = hashlib.sha1()
    for keys in keyed:
        for path, (mtime, size) in sorted(keys.items()):
            digest.update(f"{path}\0{mtime}\0{size}\n".encode())
    return digest.hexdigest()[:12]


class RunStore:
    """The run's latest snapshot, re-checked at most every `min_check_s` seconds (callers from many threads)."""

    def __init__(self, run_dir: Path, min_check_s: float = 1.0) -> None:
        self.run_dir = Path(run_dir)
        self.min_check_s = min_check_s
        self._files: dict[Path, _Parsed] = {}
        self._events: dict[Path, FileKey] | None = None
        self._curves: dict[str, list[tuple[int, float]]] = {}
        self._step_times: dict[int, float] = {}
        self._snapshot: Snapshot | None = None
        self._checked = float("-inf")
        self._lock = threading.Lock()
        # How many times a file was parsed: a refresh that finds nothing changed parses none.
        self.files_read = 0

    def snapshot(self) -> Snapshot:
        with self._lock:
            now = time.monotonic()
            if self._snapshot is not None and now - self._checked < self.min_check_s:
                return self._snapshot
            self._checked = now
            episodes = _stat(episode_files(self.run_dir))
            events = _stat(sorted(self.run_dir.rglob(EVENTS_GLOB)))
            version = _version(episodes, events)
            if self._snapshot is None or self._snapshot.version != version:
                self._snapshot = self._rebuild(episodes, events, version)
            return self._snapshot

    def _rebuild(self, episodes: dict[Path, FileKey], events: dict[Path, FileKey], version: str) -> Snapshot:
        for path in set(self._files) - set(episodes):
            del self._files[path]
        for path, key in episodes.items():
            if path not in self._files or self._files[path].key != key:
                skipped: dict[str, int] = {}
                try:
                    records = read_records([path], skipped)
                except OSError:
                    continue
                self._files[path] = _Parsed(key, records, skipped.get(str(path), 0))
                self.files_read += 1
        if events != self._events:
            self._curves, self._step_times = read_scalars(self.run_dir) if events else ({}, {})
            self._events = events
        # Steps the reader assigns change as the trainer logs more steps: assigned on copies, the parsed stay as read.
        records = [
            r if r.step is not None else r.model_copy() for p in sorted(self._files) for r in self._files[p].records
        ]
        assign_steps(records, self._step_times)
        records.sort(key=lambda r: (r.step or 0, r.time))
        skipped = {str(p): f.skipped for p, f in sorted(self._files.items()) if f.skipped}
        run = RunEpisodes(self.run_dir, records, self._curves, self._step_times, skipped)
        summary = summarize(run, version)
        return Snapshot(run, summary, {r.id: r for r in records}, {s.step: s for s in summary.step_summaries})
