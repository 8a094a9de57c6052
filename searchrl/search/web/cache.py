"""On-disk answer cache (SQLite): replays an online evaluation exactly and never pays for the same search twice."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchrl.search.base import Passage
from searchrl.shared_sqlite import connect_shared

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    query TEXT NOT NULL,
    options TEXT NOT NULL,
    passages TEXT NOT NULL,
    answered_at REAL NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    passages: list[Passage]
    answered_at: float


def cache_key(provider: str, query: str, options: dict[str, Any]) -> str:
    """Stable key of one search; `options` must hold only what changes the answer, never a credential."""
    blob = json.dumps([provider, query, options], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class WebCache:
    """Thread-safe (one lock around one connection); WAL and a busy timeout let several processes share a file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = connect_shared(self.path, _SCHEMA)

    def get(self, key: str) -> CachedAnswer | None:
        with self._lock:
            row = self._db.execute("SELECT passages, answered_at FROM answers WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return CachedAnswer(
            [Passage(p["id"], p["title"], p["text"], float(p["score"])) for p in json.loads(row[0])], float(row[1])
        )

    def put(
        self,
        key: str,
        provider: str,
        query: str,
        options: dict[str, Any],
        passages: list[Passage],
        answered_at: float | None = None,
    ) -> None:
        # First answer wins: a replay must see what the original run saw, even if a racing writer got a later one.
        row = (
            key,
            provider,
            query,
            json.dumps(options, sort_keys=True),
            json.dumps([p.to_dict() for p in passages], ensure_ascii=False),
            answered_at or time.time(),
        )
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO answers VALUES (?, ?, ?, ?, ?, ?)", row)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
