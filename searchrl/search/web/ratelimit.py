"""Async token bucket: at most `rate` requests a second on average, bursts of at most `burst`."""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    def __init__(self, rate_per_s: float | None, burst: int = 1) -> None:
        if rate_per_s is not None and rate_per_s <= 0:
            raise ValueError("rate_per_s must be positive, or None for no limit")
        self.rate = rate_per_s
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        if self.rate is None:
            return
        # The lock makes waiters queue in arrival order, so one burst of gathered queries cannot starve another.
        async with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
            self._updated = now
            if self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self.rate)
                self._tokens = 1.0
                self._updated = time.monotonic()
            self._tokens -= 1
