"""Dynamic micro-batching: requests that arrive together share one encode-and-search call."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from search_backend.base import Passage

SearchFn = Callable[[list[str], int], Awaitable[list[list[Passage]]]]


@dataclass
class _Pending:
    queries: list[str]
    top_k: int
    future: asyncio.Future = field(repr=False)


class MicroBatcher:
    """One worker drains the queue: while a batch runs, new requests pile up and form the next batch.

    A batch takes every waiting request (up to `max_batch` queries), then waits at most `max_wait_s` for more.
    Requests with different top_k run as separate calls so each gets exactly what it would get alone.
    """

    def __init__(self, search: SearchFn, max_batch: int = 64, max_wait_s: float = 0.002) -> None:
        self._search = search
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self.batches = 0
        self.batched_queries = 0

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

    async def search(self, queries: list[str], top_k: int) -> list[list[Passage]]:
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(queries, top_k, future))
        return await future

    async def _collect(self) -> list[_Pending]:
        batch = [await self._queue.get()]
        size = len(batch[0].queries)
        deadline = asyncio.get_running_loop().time() + self.max_wait_s
        while size < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            batch.append(item)
            size += len(item.queries)
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            by_k: dict[int, list[_Pending]] = defaultdict(list)
            for item in batch:
                by_k[item.top_k].append(item)
            for top_k, items in by_k.items():
                await self._run_group(top_k, items)

    async def _run_group(self, top_k: int, items: list[_Pending]) -> None:
        flat = [q for item in items for q in item.queries]
        self.batches += 1
        self.batched_queries += len(flat)
        try:
            results = await self._search(flat, top_k)
        except Exception as exc:  # noqa: BLE001 - every waiting request must hear about the failure
            for item in items:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        start = 0
        for item in items:
            if not item.future.done():
                item.future.set_result(results[start:start + len(item.queries)])
            start += len(item.queries)

    def stats(self) -> dict[str, float | int]:
        return {"enabled": True, "max_batch": self.max_batch, "max_wait_ms": self.max_wait_s * 1000,
                "batches": self.batches, "mean_batch": self.batched_queries / self.batches if self.batches else 0.0}
