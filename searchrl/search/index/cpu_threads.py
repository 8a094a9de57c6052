"""The CPU threads a search runs with: set in the thread that runs it, and every core while no other process
uses them.

OpenMP keeps its thread count per calling thread. A count set once at start-up reached torch (which copies it into
each new thread) but not FAISS, whose searches in the server's worker threads used every core whatever `--threads`
said; `apply()` sets both in the thread that is about to encode and search.

With `auto` (the server command's default on a CPU) a search runs on one fewer thread than the cores, so that
the event loop and other processes keep a core (an OpenMP thread that loses its core makes the others spin at
every barrier: on 2 cores, one query on 2 threads beside a process keeping one core busy encoded at 0.37x the rate
of one thread), but on every core while the other processes on this process's cores used under LEND_BELOW of a
core in the last window: with nothing else running, one query encoded 1.23x and a batch of 16 1.65x as fast on 2
threads as on 1 (benchmarks/threads.py, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

# Rounds an idle libgomp worker (torch's and FAISS's OpenMP) spins before it sleeps. At the default, 300,000, an
# idle worker kept a core spinning for milliseconds after each encode, away from the event loop and the client;
# 10,000 costs less CPU per query at the same rate. The figures: docs/BENCHMARKS.md#encoder-threads.
SPIN_COUNT = "10000"

# Cores the other processes may use while a search still takes every core: on 2 cores one query on 2 threads was
# 1.15x as fast as on 1 beside a process using 10 % of a core, 0.98x beside 25 %, 0.62x beside 50 %.
LEND_BELOW = 0.2
WINDOW_S = 0.5

Threads = int | Literal["auto"]


def short_openmp_spin() -> bool:
    """Ask libgomp to put idle workers to sleep after SPIN_COUNT rounds, unless the user chose a spin count or
    wait policy. libgomp reads this once, when torch or FAISS loads it: True if it was set in time."""
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return False
    if "torch" in sys.modules or "faiss" in sys.modules:
        log.debug("torch or FAISS is loaded already: libgomp keeps its spin count")
        return False
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return True


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def own_cpu_seconds() -> float:
    """CPU time of this process, every thread of it."""
    times = os.times()
    return times.user + times.system


class OtherLoad:
    """The CPU other processes used on this process's cores, in cores, over the last window of at least
    `window_s`: the busy time of those cores in /proc/stat less this process's own. None where /proc/stat cannot
    be read (not Linux): then nothing is lent.

    `start()` closes a window every `window_s` in a thread of its own, so the figure a search reads describes the
    last half second even after a quiet spell: read lazily, the first window of a burst spanned the whole quiet
    spell before it, and whatever other processes did then decided the first half second of the burst."""

    def __init__(
        self,
        cpus: set[int] | None = None,
        window_s: float = WINDOW_S,
        stat_path: Path = Path("/proc/stat"),
        own_seconds: Callable[[], float] = own_cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cpus = frozenset(os.sched_getaffinity(0) if cpus is None else cpus)
        self.window_s = window_s
        self.stat_path = stat_path
        self.own_seconds = own_seconds
        self.clock = clock
        self.tick = os.sysconf("SC_CLK_TCK")
        self.busy: float | None = None
        self._last = self._read()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and self._last is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._sample, name="searchrl-other-load", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _sample(self) -> None:
        while not self._stop.wait(self.window_s):
            self.update()

    def _read(self) -> tuple[float, float, float] | None:
        """(now, busy seconds of this process's cores, own CPU seconds), or None without /proc/stat."""
        try:
            lines = self.stat_path.read_text(encoding="ascii").splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        busy = 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in self.cpus:
                continue
            # user nice system idle iowait irq softirq steal (guest time is inside user): all but idle and iowait.
            ticks = [int(v) for v in rest.split()[:8]]
            busy += sum(ticks) - ticks[3] - ticks[4]
        return self.clock(), busy / self.tick, self.own_seconds()

    def update(self) -> float | None:
        """Others' cores in the last complete window; a new window is closed once `window_s` has passed. Called
        by the sampling thread alone (or by a caller that has not started it)."""
        last = self._last
        # A little short of a whole window still closes it: a timed wait may wake a hair early.
        if last is None or self.clock() - last[0] < 0.9 * self.window_s:
            return self.busy
        now = self._read()
        if now is None:
            return self.busy
        elapsed = now[0] - last[0]
        self.busy = max(0.0, (now[1] - last[1]) - (now[2] - last[2])) / elapsed
        self._last = now
        return self.busy


@dataclass
class ThreadPolicy:
    """`base` threads per search; with a `monitor`, all `cores` while the other processes leave them idle."""

    base: int
    cores: int = 0
    monitor: OtherLoad | None = None
    lent: int = field(default=0, init=False)  # searches that ran on every core

    @classmethod
    def from_setting(cls, threads: Threads) -> ThreadPolicy:
        if threads == "auto":
            n = cores()
            return cls(base=max(1, n - 1), cores=n, monitor=OtherLoad() if n > 1 else None)
        return cls(base=threads)

    def choose(self) -> int:
        if self.monitor is not None and self.cores > self.base:
            busy = self.monitor.busy
            if busy is not None and busy < LEND_BELOW:
                self.lent += 1
                return self.cores
        return self.base

    def stats(self) -> dict[str, float | int | str | None]:
        auto = self.monitor is not None
        busy = self.monitor.busy if self.monitor is not None else None
        return {
            "threads": f"auto ({self.base}, or {self.cores} while other processes leave the cores idle)"
            if auto
            else self.base,
            "other_processes_cores": None if busy is None else round(busy, 3),
            "searches_on_every_core": self.lent,
        }


_policy: ThreadPolicy | None = None


def configure(threads: Threads | None) -> ThreadPolicy | None:
    """Set the process's policy (None: leave the thread pools as they are); returns the one it replaces, whose
    sampling pauses until `restore` brings it back."""
    global _policy
    previous, _policy = _policy, None if threads is None else ThreadPolicy.from_setting(threads)
    _switch(previous, _policy)
    if _policy is not None:
        set_threads(_policy.base)
    return previous


def restore(previous: ThreadPolicy | None) -> None:
    global _policy
    current, _policy = _policy, previous
    _switch(current, previous)


def _switch(old: ThreadPolicy | None, new: ThreadPolicy | None) -> None:
    if old is not None and old.monitor is not None:
        old.monitor.stop()
    if new is not None and new.monitor is not None:
        new.monitor.start()


def policy() -> ThreadPolicy | None:
    return _policy


# What this module last set in each thread: a search sets its pools only when the count changes.
_thread_counts = threading.local()


def set_threads(threads: int) -> None:
    """torch's and FAISS's thread pools, as seen from the calling thread."""
    import torch

    from searchrl.search.index.faiss_import import faiss

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    _thread_counts.threads = threads


def apply() -> None:
    """Size the thread pools of the calling thread for the search it is about to run (nothing without a policy)."""
    if _policy is None:
        return
    threads = _policy.choose()
    if getattr(_thread_counts, "threads", None) != threads:
        set_threads(threads)
