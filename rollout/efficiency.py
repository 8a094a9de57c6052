"""Efficiency bonus (R1-Searcher++'s idea): among the correct samples of a prompt's group, the ones
that searched less earn more, so the policy learns to use its own knowledge when it suffices.

OpenRLHF runs all samples of one prompt together in one engine process (`generate_responses`), so
the bonus is settled there: each finished sample waits for the rest of its group, within a timeout.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


def efficiency_bonuses(searches: list[int], correct: list[bool], weight: float) -> list[float]:
    """`weight` for the correct samples with the fewest searches, 0 for the most, linear between;
    nothing for wrong samples, nor when every correct sample searched equally often."""
    counts = [s for s, ok in zip(searches, correct, strict=True) if ok]
    if not counts or min(counts) == max(counts):
        return [0.0] * len(searches)
    low, high = min(counts), max(counts)
    return [weight * (high - s) / (high - low) if ok else 0.0 for s, ok in zip(searches, correct, strict=True)]


@dataclass
class _Group:
    searches: list[int] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    bonuses: list[float] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)


class GroupBonus:
    def __init__(self, group_size: int, weight: float, timeout_s: float) -> None:
        self.group_size = group_size
        self.weight = weight
        self.timeout_s = timeout_s
        self._open: dict[str, _Group] = {}

    async def bonus(self, prompt: str, num_searches: int, correct: bool) -> float:
        group = self._open.setdefault(prompt, _Group())
        index = len(group.searches)
        group.searches.append(num_searches)
        group.correct.append(correct)
        if len(group.searches) >= self.group_size:
            del self._open[prompt]
            group.bonuses = efficiency_bonuses(group.searches, group.correct, self.weight)
            group.done.set()
        try:
            await asyncio.wait_for(group.done.wait(), self.timeout_s)
        except TimeoutError:
            # The group never filled (a sample failed, or samples went to other engines): no bonus.
            if self._open.get(prompt) is group:
                del self._open[prompt]
            return 0.0
        return group.bonuses[index]
