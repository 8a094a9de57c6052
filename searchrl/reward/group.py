"""The group-level terms the agent settles in its engine process, with the spec's weights: the efficiency
bonus (needs the rest of the prompt's group) and Router-R1's cost reward (needs recent episodes' spend).

OpenRLHF runs all samples of one prompt together in one engine process (`generate_responses`), so the
bonus is settled there: each finished sample waits for the rest of its group, within a timeout.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass, field

from searchrl.reward.components import cost_penalty, efficiency_bonuses
from searchrl.reward.router_r1 import cost_reward
from searchrl.reward.spec import RewardSpec


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


class RollingCost:
    """The cost penalty (`cost_shape: penalty`) over a rolling window of this engine process's recent episodes."""

    def __init__(self, weight: float, window: int) -> None:
        self.weight = weight
        self.recent: deque[float] = deque(maxlen=window)

    def penalty(self, cost: float) -> float:
        self.recent.append(cost)
        return cost_penalty(self.weight, cost, self.recent)


class RollingCostReward:
    """Router-R1's cost reward over a rolling window of this engine process's recent episodes. Every
    episode enters the window, right or wrong, as in the original (its main_ppo.py normalize_reward)."""

    def __init__(self, window: int) -> None:
        self.recent: deque[float] = deque(maxlen=window)

    def reward(self, cost: float) -> float:
        self.recent.append(math.sqrt(max(cost, 0.0)))
        return cost_reward(self.recent)


class EpisodeTerms:
    """The spec's group-level components for one engine process; `settle` adds them to the server's reward."""

    def __init__(self, spec: RewardSpec, samples_per_prompt: int) -> None:
        self.spec = spec
        self.efficiency = None
        if spec.efficiency_weight > 0:
            size = spec.efficiency_group_size or samples_per_prompt
            self.efficiency = GroupBonus(size, spec.efficiency_weight, spec.efficiency_timeout_s)
        routing = spec.formula == "router_r1"
        self.costs = RollingCostReward(spec.cost_window) if routing and spec.cost_shape == "router_r1" else None
        self.penalties = (
            RollingCost(spec.cost_weight, spec.cost_window) if routing and spec.cost_shape == "penalty" else None
        )

    async def settle(
        self, reward: float, logs: dict[str, float], prompt: str, num_searches: int, cost: float
    ) -> tuple[float, dict[str, float]]:
        if self.efficiency is not None:
            # Right by the metric and well formed: a sample that forged documents or wrote two answers must
            # not set the group's range of search counts nor take the bonus.
            correct = logs.get(self.spec.answer_metric, 0.0) >= 1.0 and logs.get("format_ok", 0.0) == 1.0
            bonus = await self.efficiency.bonus(prompt, num_searches, correct)
            reward, logs = reward + bonus, {**logs, "efficiency_bonus": bonus}
        if self.costs is not None:
            # Router-R1 pays for cheapness only with a right, well-formed answer (the server says which).
            normalised = self.costs.reward(cost)
            if logs.get("cost_applies"):
                reward += self.spec.cost_weight * normalised
            logs = {**logs, "search_cost": cost, "cost_reward": normalised}
        if self.penalties is not None:
            penalty = self.penalties.penalty(cost)
            reward, logs = reward - penalty, {**logs, "search_cost": cost, "cost_penalty": penalty}
        return reward, logs
