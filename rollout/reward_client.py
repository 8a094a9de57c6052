"""Client of the reward server, used by the agent at the end of every episode.

Retries ride out a restart of the server; past the deadline the error propagates and the job fails
loudly, because training on a made-up reward (a silent 0) corrupts the run without a trace.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx


class RewardServerError(RuntimeError):
    """The reward server did not give a valid answer before the deadline."""


@dataclass(frozen=True)
class RewardResult:
    reward: float
    score: float
    extra_logs: dict[str, float]


class RewardClient:
    """Posts finished episodes to one or several reward servers (comma-separated URLs, round robin)."""

    def __init__(
        self,
        urls: str | Sequence[str],
        deadline_s: float = 300.0,
        timeout_s: float = 30.0,
        token: str | None = None,
        max_connections: int = 256,
    ) -> None:
        self.urls = [u.strip().rstrip("/") for u in (urls.split(",") if isinstance(urls, str) else urls) if u.strip()]
        if not self.urls:
            raise ValueError("reward server: no URL given (e.g. http://127.0.0.1:8001)")
        self._next = itertools.cycle(self.urls)
        self.deadline_s = deadline_s
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._client = httpx.AsyncClient(
            timeout=timeout_s, headers=headers, limits=httpx.Limits(max_connections=max_connections)
        )

    async def score(
        self, query: str, prompt: str, label: Any, metadata: Mapping[str, Any] | None = None
    ) -> RewardResult:
        body = {"query": [query], "prompts": [prompt], "labels": [label], "metadata": [dict(metadata or {})]}
        start = time.monotonic()
        delay = 0.2
        last: str = "no attempt"
        while True:
            url = next(self._next)
            try:
                resp = await self._client.post(f"{url}/get_reward", json=body)
                if resp.status_code < 400:
                    data = resp.json()
                    logs = {k: float(v[0]) for k, v in data.get("extra_logs", {}).items()}
                    return RewardResult(float(data["rewards"][0]), float(data["scores"][0]), logs)
                if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
                    # The request itself is wrong: retrying cannot help, and guessing a reward would hide it.
                    raise RewardServerError(f"{url}/get_reward refused the sample: {resp.status_code} {resp.text}")
                last = f"HTTP {resp.status_code}"
            except (httpx.TransportError, ValueError, KeyError, IndexError) as e:
                last = f"{type(e).__name__}: {e}"
            if time.monotonic() - start + delay > self.deadline_s:
                raise RewardServerError(
                    f"reward server {', '.join(self.urls)} gave no valid answer within {self.deadline_s:.0f}s "
                    f"(last: {last}); stopping rather than training on made-up rewards"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def aclose(self) -> None:
        await self._client.aclose()
