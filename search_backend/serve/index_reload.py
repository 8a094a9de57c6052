"""An index rebuilt under a running retrieval server: `/health` says that the directory on disk is not the one
loaded, and `POST /admin/reload` (or SIGHUP) loads it without a restart.

The manifest is written last by the builder and removed first, so its bytes say which build the directory
holds: no manifest is a build under way, other bytes than those loaded a finished rebuild. A reload opens the
new index beside the old one (memory for both, for a moment), then swaps it in; searches already running finish
on the old one, whose memory-mapped files stay readable after the builder replaced them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from searchrl.search.base import SearchBackend
from searchrl.search.index.layout import MANIFEST

log = logging.getLogger("search_backend.serve")
RELOAD_HINT = "POST /admin/reload (with the token when the server has one), send the server SIGHUP, or restart it"


class ReloadError(RuntimeError):
    """The directory cannot be loaded now (a build under way, a broken index); the old index stays served."""


def _manifest_bytes(index_dir: Path) -> bytes | None:
    try:
        return (index_dir / MANIFEST).read_bytes()
    except FileNotFoundError:
        return None


def _summary(raw: bytes | None) -> dict[str, Any]:
    try:
        manifest = json.loads(raw or b"")
        return {"corpus_sha256": manifest["corpus"]["sha256"], "passages": manifest["passages"]}
    except (ValueError, KeyError, TypeError):
        return {}


class IndexWatch:
    """The index directory a server loaded (its manifest's digest), compared with what is on disk now."""

    def __init__(self, index_dir: str | Path) -> None:
        self.index_dir = Path(index_dir)
        # Read before the index is opened: a build landing in between then shows as "changed", never as a
        # directory that looks loaded and is not.
        raw = _manifest_bytes(self.index_dir)
        self.loaded = _digest(raw)
        self.loaded_summary = _summary(raw)
        self.reloads = 0
        self._seen: tuple[tuple[int, int, int], bytes | None] | None = None
        self._lock = asyncio.Lock()

    def _on_disk(self) -> bytes | None:
        """The manifest's bytes, re-read only when its inode, size or mtime changed (so /health stays cheap)."""
        try:
            st = os.stat(self.index_dir / MANIFEST)
        except FileNotFoundError:
            self._seen = None
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._seen is None or self._seen[0] != key:
            self._seen = (key, _manifest_bytes(self.index_dir))
        return self._seen[1]

    def state(self) -> dict[str, Any]:
        """What /health shows: `loaded` (the directory holds the index being served), `changed` (a rebuild
        finished since; reload to serve it) or `unfinished` (no manifest: a build is under way)."""
        raw = self._on_disk()
        if raw is None:
            return {"state": "unfinished", "detail": f"{self.index_dir / MANIFEST} is missing: a build is under way"}
        if _digest(raw) == self.loaded:
            return {"state": "loaded"}
        return {
            "state": "changed",
            "detail": f"{self.index_dir} was rebuilt after this server loaded it; to serve it: {RELOAD_HINT}",
            "on_disk": _summary(raw),
            "loaded": self.loaded_summary,
        }

    async def reload(self, open_index: Callable[[], SearchBackend], swap: Callable[[SearchBackend], str]) -> dict:
        """Open the directory again and `swap` it in (which returns the previous index version), unless it is
        the one loaded; ReloadError, with the old index still served, when it cannot be opened."""
        async with self._lock:
            raw = _manifest_bytes(self.index_dir)
            if raw is None:
                raise ReloadError(f"{self.index_dir / MANIFEST} is missing: a build is under way; reload when it ends")
            if _digest(raw) == self.loaded:
                return {"reloaded": False, "detail": "the directory on disk is the index already served"}
            try:
                backend = await asyncio.to_thread(open_index)
            except Exception as exc:  # noqa: BLE001 - any failure to open leaves the old index served
                raise ReloadError(f"{self.index_dir} cannot be loaded ({type(exc).__name__}: {exc})") from exc
            previous = swap(backend)
            self.loaded, self.loaded_summary = _digest(raw), _summary(raw)
            self.reloads += 1
            log.warning("reloaded %s (index version %s, was %s)", self.index_dir, backend.version, previous)
            return {
                "reloaded": True,
                "index_version": getattr(backend, "version", ""),
                "previous_version": previous,
                **self.loaded_summary,
            }


def _digest(raw: bytes | None) -> str | None:
    return None if raw is None else hashlib.sha256(raw).hexdigest()


def reload_on_sighup(reload: Callable[[], Awaitable[Any]]) -> Callable[[], None]:
    """Run `reload` when the process gets SIGHUP; returns the function that stops listening. Signals reach
    only the main thread's loop: elsewhere (a server run in a thread) there is no handler and the endpoint remains."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task] = set()

    async def logged() -> None:
        try:
            await reload()
        except ReloadError as exc:
            log.warning("SIGHUP: %s", exc)

    def on_signal() -> None:
        task = loop.create_task(logged())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, on_signal)
    except (RuntimeError, ValueError, NotImplementedError):
        return lambda: None
    return lambda: loop.remove_signal_handler(signal.SIGHUP)
