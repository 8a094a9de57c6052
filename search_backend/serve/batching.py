"""Dynamic micro-batching: requests that arrive together share one encode-and-search call."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from searchrl.search.base import Passage

log = logging.getLogger(__name__)

SearchFn = Callable[[list[str], int], Awaitable[list[list[Passage]]]]


@dataclass(eq=False)
class _Pending:
    queries: list[str]
    top_k: int
    future: asyncio.Future = field(repr=False)
    results: list[list[Passage]] = field(default_factory=list, repr=False)
    handed: int = 0  # queries given to a batch so far
    answered: int = 0

    def __post_init__(self) -> None:
        self.results = [[] for _ in self.queries]


@dataclass(frozen=True)
class _Slice:
    request: _Pending
    start: int
    stop: int


class MicroBatcher:
    """One worker forms batches of at most `max_batch` queries and runs them one after another.

    A batch waits for more requests only while fewer are waiting than the last batch served (in a
    closed loop those callers come back as soon as they are answered), and at most `max_wait_s`: a
    lone caller never waits, many callers still share one call. It then takes a fair share of every waiting
    request: a request of a thousand queries is served `max_batch` at a time alongside the others
    instead of ahead of them, so one large request cannot starve small ones. With `split_min` set, once at
    least `2 * split_min` queries are in flight (waiting, or in the batch just answered), a batch takes at most
    half of them: the callers fall into two halves, and the event loop writes one half's answers and reads its
    next requests while the encoder works through the other half. That paid when each batch was one forward
    pass; with the encoder's shortest-first chunks whole batches measured faster, so 0 (never split) is the
    default (docs/BENCHMARKS.md, "Retrieval server", has the measurements). A batch also holds at
    most `max_batch_chars` characters of queries (at least one query), which bounds the encoder's
    activation memory when queries are long. Requests with different
    top_k run as separate calls so each gets exactly what it would get alone. When a call fails and
    carried several requests, each is retried alone, so one bad request fails only itself.
    """

    def __init__(
        self,
        search: SearchFn,
        max_batch: int = 64,
        max_wait_s: float = 0.002,
        max_batch_chars: int = 8192,
        split_min: int = 0,
    ) -> None:
        self._search = search
        self.max_batch = max_batch
        self.split_min = split_min
        self.max_batch_chars = max_batch_chars
        self.max_wait_s = max_wait_s
        self._waiting: deque[_Pending] = deque()
        self._arrived = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self._last_callers = 1
        self._last_queries = 0  # queries in the last batch
        self._last_finished = 0  # requests that batch answered in full
        self.batches = 0
        self.batched_queries = 0
        self.retried_alone = 0

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
        if not queries:
            return []
        # A caller that goes away cancels the future; the worker then skips what is left of its queries.
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(_Pending(list(queries), top_k, future))
        self._arrived.set()
        return await future

    def _queued(self) -> tuple[int, int]:
        """(requests, queries) waiting to be served."""
        active = [p for p in self._waiting if not p.future.done()]
        return len(active), sum(len(p.queries) - p.handed for p in active)

    def _full(self, room: int) -> bool:
        requests, queries = self._queued()
        return requests >= self._last_callers or queries >= room

    def _batch_room(self) -> int:
        """Queries the next batch may take, set when the encoder frees: half of those in flight once they are
        at least 2 * split_min from at least two callers, else max_batch. With one forward pass per batch, halves
        of 8 measured slower than whole batches of 16 and halves of 16 and 32 faster (docs/BENCHMARKS.md). One
        caller's request gains nothing: it is answered only once all of it is done."""
        requests, queries = self._queued()
        in_flight = queries + self._last_queries
        if self.split_min and requests + self._last_finished >= 2 and in_flight >= 2 * self.split_min:
            return min(self.max_batch, in_flight // 2)
        return self.max_batch

    async def _wait_for_batch(self) -> int:
        """Wait until a batch should start; returns the queries it may take."""
        room = self._batch_room()
        while not self._waiting:
            self._arrived.clear()
            await self._arrived.wait()
        deadline = asyncio.get_running_loop().time() + self.max_wait_s
        while not self._full(room):
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)
        return room

    def _take(self, room: int) -> list[_Slice]:
        """A fair share of every waiting request: each gets max_batch // waiting, then the rest in order."""
        active = [p for p in self._waiting if not p.future.done()]
        self._waiting.clear()
        slices: list[_Slice] = []
        chars = self.max_batch_chars
        share = max(1, room // max(1, len(active)))
        for round_share in (share, room):
            for request in active:
                start = stop = request.handed
                while stop < len(request.queries) and stop - start < round_share and room > 0:
                    size = len(request.queries[stop])
                    if size > chars and (slices or stop > start):
                        break
                    chars -= size
                    room -= 1
                    stop += 1
                if stop > start:
                    slices.append(_Slice(request, start, stop))
                    request.handed = stop
        self._waiting.extend(p for p in active if p.handed < len(p.queries))
        self._last_callers = max(1, len({id(s.request) for s in slices}))
        self._last_queries = sum(s.stop - s.start for s in slices)
        self._last_finished = len({id(s.request) for s in slices if s.stop == len(s.request.queries)})
        return slices

    async def _run(self) -> None:
        while True:
            slices = self._take(await self._wait_for_batch())
            by_k: dict[int, list[_Slice]] = defaultdict(list)
            for s in slices:
                by_k[s.request.top_k].append(s)
            for top_k, group in by_k.items():
                await self._run_group(top_k, group)

    async def _call(self, top_k: int, group: list[_Slice]) -> None:
        flat = [q for s in group for q in s.request.queries[s.start : s.stop]]
        self.batches += 1
        self.batched_queries += len(flat)
        results = await self._search(flat, top_k)
        at = 0
        for s in group:
            request = s.request
            request.results[s.start : s.stop] = results[at : at + s.stop - s.start]
            at += s.stop - s.start
            request.answered += s.stop - s.start
            if request.answered == len(request.queries) and not request.future.done():
                request.future.set_result(request.results)

    async def _run_group(self, top_k: int, group: list[_Slice]) -> None:
        try:
            await self._call(top_k, group)
            return
        except Exception as exc:  # noqa: BLE001 - the failure belongs to one request or to all; find out which
            if len({id(s.request) for s in group}) == 1:
                self._fail(group[0].request, exc)
                return
            log.warning("a batch of %d requests failed (%s); retrying each alone", len(group), exc)
        for s in group:
            if s.request.future.done():
                continue
            self.retried_alone += 1
            try:
                await self._call(top_k, [s])
            except Exception as exc:  # noqa: BLE001 - every waiting request must hear about its failure
                self._fail(s.request, exc)

    def _fail(self, request: _Pending, exc: BaseException) -> None:
        if not request.future.done():
            request.future.set_exception(exc)
        with contextlib.suppress(ValueError):
            self._waiting.remove(request)

    def stats(self) -> dict[str, float | int]:
        return {
            "enabled": True,
            "max_batch": self.max_batch,
            "max_wait_ms": self.max_wait_s * 1000,
            "max_batch_chars": self.max_batch_chars,
            "split_min": self.split_min,
            "batches": self.batches,
            "mean_batch": self.batched_queries / self.batches if self.batches else 0.0,
            "retried_alone": self.retried_alone,
        }
