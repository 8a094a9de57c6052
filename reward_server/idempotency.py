"""A retried reward request is scored once: the client names each request with an `Idempotency-Key` header
(RewardClient sends a fresh one per sample and the same one on every retry), and the server answers a key it
has seen with the answer it gave, without scoring or logging again.

Answers are kept in memory, and every line of the score log (`--log-jsonl`) records the key of its request, so
a server restarted after a kill -9 reads the log's tail back and recognises a retry of a request its
predecessor scored and logged but never answered (issue 23: 14-34 samples in 20,000 were scored and logged
twice across a kill). Without a key a request is scored as before.
"""

from __future__ import annotations

import asyncio
import json
import mmap
import os
import re
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from searchrl.server import RequestError

HEADER = b"idempotency-key"
FIELD = "Idempotency-Key"
MAX_KEY_CHARS = 200
# Answers kept: several times the requests one server holds at once (4,096 by default), so any request in
# flight when a client's connection broke is still known when its retry comes.
CAPACITY = 65_536
# Lines of the score log read back at start-up. An answer lost to a kill was logged moments before it, so the
# lines after it are the few requests in flight then (at most 4,096 per server process).
RESTORE_LINES = 4096
# Where a score-log line's query begins: the fields before it are all a restart needs, parsed without the text.
_QUERY_SEPARATOR = b', "query": '  # as json.dumps writes it; any other spacing is found by the pattern
_QUERY_KEY = re.compile(rb',\s*"query"\s*:')
INDEX = ("item", "items")
_KEYED = b'{"request_id"'  # how a line of a keyed request begins (log_fields come first)
_KEY = re.compile(rb"[\x21-\x7e]{1,%d}" % MAX_KEY_CHARS)


def request_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The request's Idempotency-Key, None when it has none; 422 when it is not short printable ASCII."""
    raw = next((value for name, value in headers if name == HEADER), None)
    if raw is None:
        return None
    if _KEY.fullmatch(raw) is None:
        raise RequestError(FIELD, f"must be 1 to {MAX_KEY_CHARS} printable ASCII characters, e.g. a UUID")
    return raw.decode("ascii")


def body_digest(body: bytes) -> str:
    """Tells a retry (the same bytes) from a key reused for another body; a check against mistakes, not attacks,
    so a CRC (several times cheaper than a cryptographic hash on every request)."""
    return f"{len(body)}-{zlib.crc32(body):08x}"


def log_fields(key: str | None, digest: str, item: int, items: int) -> dict[str, Any]:
    """What a score-log line records of its request, so a restarted server can answer its retry; they open the
    line, before the reward and the query (see `logged_answers`)."""
    if key is None:
        return {}
    return {"request_id": key, "request_digest": digest, "item": item, "items": items}


class RecentAnswers:
    """The answers to the last `capacity` keyed requests, and the requests being scored now: a retry that
    arrives while its first try is still running waits for that try's answer instead of scoring again."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self.replayed = 0
        self._done: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._running: dict[str, tuple[str, asyncio.Future[bytes]]] = {}

    def __len__(self) -> int:
        return len(self._done)

    def remember(self, key: str, digest: str, answer: bytes) -> None:
        self._done[key] = (digest, answer)
        self._done.move_to_end(key)
        while len(self._done) > self.capacity:
            self._done.popitem(last=False)

    async def answer(self, key: str, digest: str, compute: Callable[[], Awaitable[bytes]]) -> bytes:
        """The answer already given to `key`, the one its running try gives, or `compute()`'s."""
        while True:
            if (done := self._done.get(key)) is not None:
                same_body(done[0], digest)
                self._done.move_to_end(key)
                self.replayed += 1
                return done[1]
            running = self._running.get(key)
            if running is None:
                break
            same_body(running[0], digest)
            try:
                answer = await asyncio.shield(running[1])
            except asyncio.CancelledError:
                if not running[1].cancelled():
                    raise  # this request was cancelled, not the first try
                continue  # the first try was cancelled: score here
            self.replayed += 1
            return answer
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._running[key] = (digest, future)
        try:
            answer = await compute()
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a refusal no retry waited for is not an unhandled error
            raise
        except BaseException:
            future.cancel()
            raise
        finally:
            del self._running[key]
        future.set_result(answer)
        self.remember(key, digest, answer)
        return answer


def same_body(known: str, digest: str) -> None:
    if known != digest:
        raise RequestError(FIELD, "was already used for a different body; send a new key with each new request")


def request_parts(path: Path, count: int) -> Iterator[dict[str, Any]]:
    """The fields before the query (the request's and the reward's) of each of the last `count` whole lines of a
    score log that carry a request key. The file is mapped, not read: only those fields are copied and parsed."""
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            # Text after the last newline is a line torn by a kill mid-write: its request was never answered.
            end = mm.rfind(b"\n")
            while end >= 0 and count > 0:
                start = mm.rfind(b"\n", 0, end) + 1
                if mm[start : start + len(_KEYED)] == _KEYED:
                    stop = mm.find(_QUERY_SEPARATOR, start, end)
                    found = stop if stop >= 0 else _query_key(mm[start:end], start)
                    try:
                        yield json.loads(mm[start:found] + b"}") if found >= 0 else {}
                    except ValueError:
                        pass
                end, count = start - 1, count - 1


def _query_key(line: bytes, offset: int) -> int:
    match = _QUERY_KEY.search(line)
    return -1 if match is None else offset + match.start()


def logged_answers(
    path: Path, encode: Callable[[list[dict[str, Any]]], bytes], count: int = RESTORE_LINES
) -> list[tuple[str, str, bytes]]:
    """(key, digest, answer) of every keyed request whose lines are all among the last `count` of the score
    log; `encode` turns a request's records into the answer the server gives. A line torn by a kill mid-write
    is left out: its request was never answered, so its retry is scored."""
    if not path.exists():
        return []
    requests: dict[str, list[dict[str, Any]]] = {}
    for record in request_parts(path, count):
        if not isinstance(record.get("request_id"), str) or any(type(record.get(k)) is not int for k in INDEX):
            continue
        if not 0 <= record["item"] < record["items"] <= count:
            continue  # not a line this server wrote, or a request too large to be whole among the lines read
        records = requests.setdefault(record["request_id"], [{}] * record["items"])
        if len(records) == record["items"]:
            records[record["item"]] = record
    return [(key, records[0]["request_digest"], encode(records)) for key, records in requests.items() if all(records)]
