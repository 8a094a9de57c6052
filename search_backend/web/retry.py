"""Tries with exponential backoff that honour a server's Retry-After."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class RetryableError(Exception):
    """A failure another try may fix; `retry_after_s` is the server's own wait when it gave one."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def with_retries(attempt: Callable[[], Awaitable[T]], *, retries: int, backoff_s: float, backoff_max_s: float,
                       retry_after_max_s: float) -> T:
    """Run `attempt` up to retries + 1 times; re-raises the last RetryableError when every try failed."""
    for n in range(retries + 1):
        try:
            return await attempt()
        except RetryableError as exc:
            if n == retries:
                raise
            wait = min(backoff_max_s, backoff_s * 2**n)
            if exc.retry_after_s is not None:
                # The server knows its own quota window; a cap keeps a hostile or buggy header from parking us forever.
                wait = min(max(wait, exc.retry_after_s), retry_after_max_s)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")
