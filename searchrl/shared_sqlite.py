"""connect_shared: one SQLite file that several processes of a run open at once (web cache, web budget, judge cache).

Switching a new file to WAL needs an exclusive lock, and SQLite answers "database is locked" at once, without
waiting out the busy timeout, when two processes race to set it up (4 engines opening one budget file did, in CI).
So the set-up runs under an advisory lock on a sidecar file; afterwards WAL and the busy timeout order the writers.
"""

from __future__ import annotations

import fcntl
import sqlite3
from pathlib import Path
from typing import Literal

IsolationLevel = Literal["DEFERRED", "IMMEDIATE", "EXCLUSIVE"] | None


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def connect_shared(
    path: str | Path,
    *setup: str,
    isolation_level: IsolationLevel = None,
    timeout: float = 30.0,
) -> sqlite3.Connection:
    """Opens `path` in WAL mode and runs the `setup` statements (CREATE TABLE IF NOT EXISTS ...), one process at a
    time. `isolation_level=None` is autocommit, as the meters use it; the judge's cache keeps sqlite3's default."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(path), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=isolation_level, timeout=timeout)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            for statement in setup:
                db.execute(statement)
            if db.in_transaction:
                db.commit()
        except BaseException:
            db.close()
            raise
    return db
