"""The cost term of LLM routing (Router-R1's idea): an episode's spend, normalised over a rolling
window of recent episodes' spend in this engine process, so the weight means the same whether the
pool's prices are cents or dollars."""

from __future__ import annotations

from collections import deque


class RollingCost:
    def __init__(self, window: int) -> None:
        self.recent: deque[float] = deque(maxlen=window)

    def normalised(self, cost: float) -> float:
        """The cost over the largest of the recent ones (this one included): in [0, 1]."""
        self.recent.append(cost)
        top = max(self.recent)
        return cost / top if top > 0 else 0.0
