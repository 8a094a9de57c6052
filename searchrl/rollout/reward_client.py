"""Client of the reward server, used by the agent at the end of every episode.

Retries ride out a restart of the server; past the deadline the error propagates and the job fails
loudly, because training on a made-up reward (a silent 0) corrupts the run without a trace. A sample
that cannot be sent at all (a NaN label) fails at once, naming the field: no server can fix it.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from searchrl.http_transport import (
    HttpRefusedError,
    HttpSession,
    RequestEncodingError,
    RetryableError,
    RetryPolicy,
)


class RewardServerError(RuntimeError):
    """The reward server did not give a valid answer before the deadline, or refused the sample."""


class RewardRequestError(ValueError):
    """The sample cannot be sent as JSON (e.g. a NaN or Infinity in the label or metadata): fix the data."""


@dataclass(frozen=True)
class RewardResult:
    reward: float
    score: float
    extra_logs: dict[str, float]


def _parse(data: Any) -> RewardResult:
    logs = {k: float(v[0]) for k, v in data.get("extra_logs", {}).items()}
    return RewardResult(float(data["rewards"][0]), float(data["scores"][0]), logs)


class RewardClient:
    """Posts finished episodes to one or several reward servers (comma-separated URLs, round robin).

    At most `max_connections` requests are in flight; the others wait their turn without their
    `timeout_s` (the time one answer may take) running. `deadline_s` bounds the whole call, waits included.
    """

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
        self._retry = RetryPolicy(retries=None, deadline_s=deadline_s, backoff_s=0.2, backoff_max_s=5.0)
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._http = HttpSession(timeout_s=timeout_s, max_in_flight=max_connections, headers=headers)

    async def score(
        self, query: str, prompt: str, label: Any, metadata: Mapping[str, Any] | None = None
    ) -> RewardResult:
        body = {"query": [query], "prompts": [prompt], "labels": [label], "metadata": [dict(metadata or {})]}
        # One key per sample, the same on every retry: the server scores and logs the sample once, even when
        # an answer was lost to a restart (reward_server/idempotency.py).
        key = {"Idempotency-Key": uuid.uuid4().hex}
        try:
            return await self._http.call_json(
                "POST", lambda: f"{next(self._next)}/get_reward", body, parse=_parse, retry=self._retry, headers=key
            )
        except RequestEncodingError as e:
            raise RewardRequestError(f"the reward request cannot be sent: {e}") from None
        except HttpRefusedError as e:
            # The request itself is wrong: retrying cannot help, and guessing a reward would hide it.
            raise RewardServerError(f"{e.url} refused the sample: {e.status} {e.text[:500]}") from None
        except RetryableError as e:
            raise RewardServerError(
                f"reward server {', '.join(self.urls)} gave no valid answer within {self.deadline_s:.0f}s "
                f"({e.tries} tries; last: {e}); stopping rather than training on made-up rewards"
            ) from None

    async def aclose(self) -> None:
        await self._http.aclose()
