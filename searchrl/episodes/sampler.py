"""A bounded sample of the episodes one process finishes, as JSON lines a live run can be read from.

The agent cannot know the trainer's step, so the sample is by count: of every `share` episodes this process
finishes (its part of one rollout step) the first `per_step` are kept, one file per such window, named
`<hostname>-<pid>-w<window:06d>.jsonl` so that every engine process of a job writes beside the others.

A long run stays bounded: past `max_windows` files, every other file of the older half is deleted, the first and the
newer half kept. "Every other" goes by window number, not by place in the list: the older half loses its windows of
the lowest power-of-two stride (odd ones first, then those that are 2 mod 4, ...), so what survives there is an even
stride over the whole run. Thinning by place would shift the survivors down the list at every pass until all but the
first were gone, and a long run would keep its first step and its last few hundred only.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from searchrl.episodes.record import EpisodeRecord

log = logging.getLogger("searchrl.episodes.sampler")
# Below this the older half, its first file aside, could be empty, and a thinning would delete nothing.
MIN_WINDOWS = 4


def stride(window: int) -> int:
    """The largest power of two dividing a window's number (1 for odd ones): the thinning drops the lowest first."""
    return window & -window


def window_name(window: int, host: str | None = None, pid: int | None = None) -> str:
    return f"{host or socket.gethostname()}-{pid if pid is not None else os.getpid()}-w{window:06d}.jsonl"


class EpisodeSampler:
    """Counts the episodes `offer`ed to it and writes the kept ones; never raises for the file system (an OSError
    is logged once and the sampler stops writing), so a full disk cannot fail an episode."""

    def __init__(self, directory: str | Path, per_step: int, share: int, max_windows: int = 500) -> None:
        if per_step < 1:
            raise ValueError(f"per_step: keep at least 1 episode a window (got {per_step}); 0 means no sampler")
        if share < 1:
            raise ValueError(f"share: at least 1 episode a window (got {share})")
        if max_windows < MIN_WINDOWS:
            raise ValueError(f"max_windows: at least {MIN_WINDOWS} (got {max_windows})")
        self.directory = Path(directory)
        self.per_step = per_step
        self.share = share
        self.max_windows = max_windows
        self.offered = 0
        self.written = 0
        self.unbuilt = 0
        self.broken = False
        self.windows: list[int] = []  # this process's window files on disk, oldest first
        self._file: TextIO | None = None
        self._window: int | None = None
        self._prefix = window_name(0)[: -len("000000.jsonl")]
        # Should an engine finish episodes on more than one thread, a window's count and its file still agree.
        self._lock = threading.Lock()

    def path(self, window: int) -> Path:
        return self.directory / f"{self._prefix}{window:06d}.jsonl"

    def offer(self, build: Callable[[], EpisodeRecord]) -> bool:
        """Count one finished episode; when it is among its window's first `per_step`, build its record and append
        it. `build` runs only for a kept episode, so the others cost a counter. Returns whether one was written."""
        with self._lock:
            window, position = divmod(self.offered, self.share)
            self.offered += 1
            if position >= self.per_step or self.broken:
                return False
            try:
                line = build().model_dump_json() + "\n"
            except Exception as e:
                # Whatever a record's fields hold, the episode it describes goes on to training.
                if not self.unbuilt:
                    log.warning("episode records: an episode's record could not be built (%r); it is left out", e)
                self.unbuilt += 1
                return False
            try:
                self._append(window, line)
            except OSError as e:
                self._stop(e)
                return False
            self.written += 1
            return True

    def write(self, record: EpisodeRecord) -> bool:
        """`offer` of a record already built."""
        return self.offer(lambda: record)

    def __enter__(self) -> EpisodeSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError as e:
                    self._stop(e)
                self._file = None

    def _append(self, window: int, line: str) -> None:
        if window != self._window or self._file is None:
            if self._file is not None:
                self._file.close()
                self._file = None
            self.directory.mkdir(parents=True, exist_ok=True)
            self._file = self.path(window).open("a", encoding="utf-8")
            self._window = window
            self.windows.append(window)
            self._thin()
        # One write of the whole line, flushed (no fsync): a reader of a live run sees whole records.
        self._file.write(line)
        self._file.flush()

    def _thin(self) -> None:
        while len(self.windows) > self.max_windows:
            older = self.windows[1 : len(self.windows) // 2]
            lowest = min(stride(w) for w in older)
            dropped = {w for w in older if stride(w) == lowest}
            for window in dropped:
                self.path(window).unlink(missing_ok=True)
            self.windows = [w for w in self.windows if w not in dropped]

    def _stop(self, error: OSError) -> None:
        self.broken = True
        log.warning("episode records: cannot write to %s (%s); no more episodes are kept", self.directory, error)
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
