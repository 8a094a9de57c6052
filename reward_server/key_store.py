"""The answers to keyed requests, shared by every worker process of one reward server: an SQLite database in WAL
mode beside the score log (`scored.jsonl.keys.sqlite`). With `--workers N` a retry may reach another worker than
its first try; the store is what makes it answered from the first try's score and not logged a second time.

A scored sample is settled in two steps, the row first: its key is inserted (the insert is the arbiter between
workers: a key already there is answered from its row), then its lines go to the score log; rows are marked
logged every 50 ms. Requests that finish together share one transaction and one log write, so under load the
server is faster than with a write per request. A worker killed before its rows were marked leaves rows whose
owner is dead: whoever meets one next looks for its lines in the log's tail and writes them only when they are
missing (from the retry's own body, which is the same request), so no sample is lost or logged twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil
from starlette.concurrency import run_in_threadpool

from reward_server.idempotency import RESTORE_LINES, logged_answers, request_parts

log = logging.getLogger("reward_server")

SUFFIX = ".keys.sqlite"
# Rows kept: far more than the requests in flight on every worker together (4,096 each by default), so a retry
# always finds its first try; about 150 bytes a row. Pruned every PRUNE_EVERY inserts.
KEEP_ROWS = 262_144
PRUNE_EVERY = 4096
# How often what was logged is marked logged in the store.
MARK_AFTER_S = 0.05
# How long a retry waits for a live worker that won the key to log its lines before answering anyway.
WAIT_FOR_OWNER_S = 30.0
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, digest TEXT NOT NULL, answer BLOB NOT NULL, "
    "owner TEXT NOT NULL, logged INTEGER NOT NULL)"
)
INSERT = (
    "INSERT INTO answers (key, digest, answer, owner, logged) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT(key) DO NOTHING RETURNING rowid"
)


class ScoreLog(Protocol):
    def write(self, records: list[dict[str, Any]]) -> None: ...


def store_path(score_log: Path) -> Path:
    return score_log.with_name(score_log.name + SUFFIX)


def process_id() -> str:
    """This process, as a row's owner: pid and start time (a pid alone is reused), then a part of its own so two
    stores in one process (tests) tell their rows apart."""
    return f"{os.getpid()}:{psutil.Process().create_time():.2f}:{uuid.uuid4().hex[:8]}"


def alive(owner: str) -> bool:
    pid, created, _ = (owner.split(":") + ["", ""])[:3]
    try:
        process = psutil.Process(int(pid))
        return f"{process.create_time():.2f}" == created and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError):
        return False


@dataclass(frozen=True)
class Settled:
    """What a keyed request is answered: its digest (a reused key is refused) and answer, and whether this request
    was the one scored and logged."""

    digest: str
    answer: bytes
    ours: bool


@dataclass
class _Pending:
    request_key: str
    digest: str
    answer: bytes
    records: list[dict[str, Any]]
    future: asyncio.Future[Settled]


@dataclass
class _Row:
    digest: str
    answer: bytes
    owner: str
    logged: bool


@dataclass
class KeyStore:
    path: Path
    score_log: Path | None
    owner: str = field(default_factory=process_id)
    _pending: list[_Pending] = field(default_factory=list)
    _flusher: asyncio.Task[None] | None = None
    _mark_timer: asyncio.TimerHandle | None = None
    _waiting: set[asyncio.Future[Any]] = field(default_factory=set)
    _unmarked: list[str] = field(default_factory=list)
    _inserts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _db: sqlite3.Connection | None = None
    _writer: ScoreLog | None = None

    def open(self, encode: Callable[[list[dict[str, Any]]], bytes]) -> int:
        """Opens (or makes) the store; keys in the score log's tail that it lacks (a log written before it, or a
        store deleted) are added as answered. Returns how many. Blocking: call it off the event loop, and before
        the score log is opened for writing (which ends a torn last line, that must not read as logged)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        # A killed process loses no committed row in WAL mode whatever this says; synchronous=OFF drops the
        # fsyncs of each checkpoint too (every ~400 requests), which cost tens of ms at a time here. What an OS
        # crash could lose, the score log (never fsynced either) loses as well.
        db.execute("PRAGMA synchronous=OFF")
        db.execute(SCHEMA)
        self._db = db
        added = 0
        if self.score_log is not None:
            restored = logged_answers(self.score_log, encode)
            with self._transaction():
                for key, digest, answer in restored:
                    added += db.execute(INSERT, (key, digest, answer, "log", 1)).fetchone() is not None
        return added

    def write_to(self, writer: ScoreLog | None) -> None:
        self._writer = writer

    def close(self) -> None:
        """Marks the last batch logged and closes; blocking."""
        if self._db is None:
            return
        with self._transaction():
            self._mark()
        self._db.close()
        self._db = None

    async def drain(self) -> None:
        """Waits for the batches and retries in progress (before `close`, which marks the last batch)."""
        if self._mark_timer is not None:
            self._mark_timer.cancel()
            self._mark_timer = None
        while (self._flusher is not None and not self._flusher.done()) or self._waiting:
            await asyncio.gather(*[t for t in (self._flusher, *self._waiting) if t is not None and not t.done()])

    async def settle(self, key: str, digest: str, answer: bytes, records: list[dict[str, Any]]) -> Settled:
        """This request's answer once its key is settled across workers: its own when its row went in first (its
        records then logged), else the row's answer, waiting until that row's lines are logged."""
        future: asyncio.Future[Settled] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(key, digest, answer, records, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        # Group commit: what finishes while a batch is committed goes into the next one. No await after the
        # loop's last check, so `settle` never appends to a flusher about to end.
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                results = await run_in_threadpool(self._commit, batch)
            except Exception as exc:
                for p in batch:
                    p.future.set_exception(exc)
                    p.future.exception()  # retrieved: a request cancelled meanwhile does not warn about it
                continue
            for p, row in zip(batch, results, strict=True):
                if row is None:
                    p.future.set_result(Settled(p.digest, p.answer, True))
                else:
                    self._keep(asyncio.create_task(self._settle_taken(p, row)))
        if self._unmarked and self._mark_timer is None:
            self._mark_timer = asyncio.get_running_loop().call_later(MARK_AFTER_S, self._mark_when_idle)

    def _mark_when_idle(self) -> None:
        """What was logged in the last MARK_AFTER_S is marked so in one transaction: a statement and a commit
        saved per request. Until then a row reads as not yet logged, which costs only a retry at another worker
        that waits for it, and a takeover that reads the log's tail to see."""
        self._mark_timer = None
        self._keep(asyncio.ensure_future(run_in_threadpool(self._mark_alone)))

    def _keep(self, task: asyncio.Future[Any]) -> None:
        self._waiting.add(task)
        task.add_done_callback(self._waiting.discard)

    def _commit(self, batch: list[_Pending]) -> list[_Row | None]:
        """Each key of the batch inserted, or its row when another request got there first (one transaction; a
        batch of one is a single statement, atomic by itself); then the inserted requests' lines in one write to
        the score log. They are marked logged later, several batches at a time (`_mark_when_idle`)."""
        assert self._db is not None
        db, results = self._db, []
        mark = self.score_log is not None
        self._inserts += len(batch)
        prune = self._inserts >= PRUNE_EVERY
        with self._lock if len(batch) == 1 and not prune else self._transaction():
            for p in batch:
                if db.execute(INSERT, (p.request_key, p.digest, p.answer, self.owner, 0 if mark else 1)).fetchone():
                    results.append(None)
                else:
                    results.append(self._row(p.request_key))
            if prune:
                self._inserts = 0
                db.execute(
                    "DELETE FROM answers WHERE rowid <= (SELECT max(rowid) FROM answers) - ?",
                    (KEEP_ROWS,),
                )
        ours = [p for p, row in zip(batch, results, strict=True) if row is None]
        if mark and ours:
            self._log([r for p in ours for r in p.records])
            with self._lock:
                self._unmarked += [p.request_key for p in ours]
        return results

    def _mark(self) -> None:
        if self._unmarked:
            assert self._db is not None
            self._db.executemany("UPDATE answers SET logged = 1 WHERE key = ?", [(k,) for k in self._unmarked])
            self._unmarked = []

    def _mark_alone(self) -> None:
        with self._transaction():
            self._mark()

    def _row(self, key: str) -> _Row | None:
        assert self._db is not None
        found = self._db.execute("SELECT digest, answer, owner, logged FROM answers WHERE key = ?", (key,)).fetchone()
        return None if found is None else _Row(found[0], found[1], found[2], bool(found[3]))

    async def _settle_taken(self, p: _Pending, row: _Row) -> None:
        """A key another request inserted first: answered from its row once its lines are in the log (at once
        when there is no log), writing them from this request when the worker that inserted it died first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_FOR_OWNER_S
        try:
            current: _Row | None = row
            while current is not None and not current.logged and current.digest == p.digest:
                if not alive(current.owner):
                    current = await run_in_threadpool(self._take_over, p)
                    break
                if loop.time() > deadline:
                    log.warning(
                        "key %s: its worker has not logged it in %.0f s; answering", p.request_key, WAIT_FOR_OWNER_S
                    )
                    break
                await asyncio.sleep(0.005)
                current = await run_in_threadpool(self._read, p.request_key)
            current = current or row
            if not p.future.done():
                p.future.set_result(Settled(current.digest, current.answer, False))
        except Exception as exc:
            if not p.future.done():
                p.future.set_exception(exc)
                p.future.exception()

    def _read(self, key: str) -> _Row | None:
        with self._lock:
            return self._row(key)

    def _take_over(self, p: _Pending) -> _Row | None:
        """The row's worker died between inserting it and marking it logged: under the write lock (one taker at
        a time), its lines are written from this request unless the log's tail already has them."""
        with self._transaction():
            row = self._row(p.request_key)
            if row is None or row.logged or alive(row.owner):
                return row
            tail = request_parts(self.score_log, RESTORE_LINES) if self.score_log is not None else iter(())
            logged = {r.get("item") for r in tail if r.get("request_id") == p.request_key}
            if len(logged) < len(p.records):
                self._log(p.records)
            assert self._db is not None
            self._db.execute("UPDATE answers SET logged = 1, owner = ? WHERE key = ?", (self.owner, p.request_key))
            return _Row(row.digest, row.answer, self.owner, True)

    def _log(self, records: list[dict[str, Any]]) -> None:
        if self._writer is not None:
            self._writer.write(records)

    def _transaction(self) -> _Transaction:
        assert self._db is not None
        return _Transaction(self._db, self._lock)


class _Transaction:
    """BEGIN IMMEDIATE (the write lock across processes, taken at once) ... COMMIT, or ROLLBACK on an error; one
    thread of this process at a time."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self.db, self.lock = db, lock

    def __enter__(self) -> None:
        self.lock.acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self.lock.release()
