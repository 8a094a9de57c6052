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
import os
import re
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
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
_BLOCK = 1 << 20
# Where a score-log line's query begins: the fields before it are all a restart needs, parsed without the text.
_QUERY_KEY = re.compile(rb',\s*"query"\s*:')
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
                _same_body(done[0], digest)
                self._done.move_to_end(key)
                self.replayed += 1
                return done[1]
            running = self._running.get(key)
            if running is None:
                break
            _same_body(running[0], digest)
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


def _same_body(known: str, digest: str) -> None:
    if known != digest:
        raise RequestError(FIELD, "was already used for a different body; send a new key with each new request")


def tail_lines(path: Path, count: int) -> list[bytes]:
    """The last `count` lines of `path` (fewer when it is shorter), read backwards in blocks."""
    blocks: list[bytes] = []
    newlines = 0
    with open(path, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        while end > 0 and newlines <= count:
            start = max(0, end - _BLOCK)
            fh.seek(start)
            blocks.append(fh.read(end - start))
            newlines += blocks[-1].count(b"\n")
            end = start
    lines = b"".join(reversed(blocks)).split(b"\n")
    if end > 0:
        lines = lines[1:]  # the first piece may be the end of an earlier line
    return lines[-count - 1 :]


def _request_part(line: bytes) -> dict[str, Any] | None:
    """A score-log line's fields before its query (the request's and the reward's), or None without a key."""
    if not line.startswith(b'{"request_id"'):
        return None
    end = _QUERY_KEY.search(line)
    try:
        return json.loads(line[: end.start()] + b"}") if end else None
    except ValueError:
        return None


def logged_answers(
    path: Path, encode: Callable[[list[dict[str, Any]]], bytes], count: int = RESTORE_LINES
) -> list[tuple[str, str, bytes]]:
    """(key, digest, answer) of every keyed request whose lines are all among the last `count` of the score
    log; `encode` turns a request's records into the answer the server gives. Text after the last newline is
    a line torn by a kill mid-write: its request was never answered, so it is left out and its retry scored."""
    if not path.exists():
        return []
    requests: dict[str, list[dict[str, Any]]] = {}
    for line in tail_lines(path, count)[:-1]:
        record = _request_part(line)
        if record is None or type(record.get("item")) is not int or type(record.get("items")) is not int:
            continue
        records = requests.setdefault(record["request_id"], [{}] * record["items"])
        if len(records) == record["items"] and 0 <= record["item"] < len(records):
            records[record["item"]] = record
    return [(key, records[0]["request_digest"], encode(records)) for key, records in requests.items() if all(records)]
