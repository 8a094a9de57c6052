"""The search agent on OpenRLHF's own agent classes (`openrlhf.utils.agent`), no fork.

OpenRLHF builds `AgentExecutor()` in every vLLM engine process; the resolved stage config reaches
those processes through the file named by $SEARCHRL_CONFIG, and the HTTP clients are made once per
process (`Runtime.current()`), never per episode.
"""

from __future__ import annotations

import importlib.util
import json
import os
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from rollout.config import CONFIG_ENV, ConfigError, StageConfig
from rollout.cost import RollingCost
from rollout.efficiency import GroupBonus
from rollout.environment import Episode, SearchEnvironment
from rollout.protocol import END_QUERY
from rollout.reward_client import RewardClient
from search_backend.config import open_backend


@dataclass
class Runtime:
    """What one engine process shares across its episodes: the config, the environment, the clients."""

    stage: StageConfig
    environment: SearchEnvironment
    rewards: RewardClient
    efficiency: GroupBonus | None = None
    costs: RollingCost | None = None

    _current: ClassVar[Runtime | None] = None

    @classmethod
    def from_stage(cls, stage: StageConfig) -> Runtime:
        rewards = RewardClient(
            stage.reward_server.urls,
            deadline_s=stage.reward_server.deadline_s,
            timeout_s=stage.reward_server.timeout_s,
            token=os.environ.get(stage.reward_server.token_env),
        )
        ep = stage.episode
        efficiency = None
        if ep.efficiency_weight > 0:
            size = ep.efficiency_group_size or int(stage.openrlhf.get("rollout.n_samples_per_prompt") or 1)
            efficiency = GroupBonus(size, ep.efficiency_weight, ep.efficiency_timeout_s)
        costs = RollingCost(ep.cost_window) if ep.cost_weight > 0 else None
        return cls(stage, SearchEnvironment(open_backend(stage.search), ep), rewards, efficiency, costs)

    @classmethod
    def from_env(cls) -> Runtime:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise ConfigError(
                f"${CONFIG_ENV} is not set: it must name the resolved stage config (launch/ray_submit.sh sets it)"
            )
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"${CONFIG_ENV}={path}: no such file")
        return cls.from_stage(StageConfig.model_validate(json.loads(file.read_text(encoding="utf-8"))))

    @classmethod
    def current(cls) -> Runtime:
        if cls._current is None:
            cls._current = cls.from_env()
        return cls._current

    @classmethod
    def install(cls, runtime: Runtime | None) -> None:
        """Make `runtime` the process's runtime (tests and the quickstart build their own)."""
        cls._current = runtime


class SegmentEngine:
    """Wraps the engine OpenRLHF passes in so every segment stops on `<|end_of_query|>` (kept in the
    output) and stays within the per-segment token cap; OpenRLHF's multi-turn loop would otherwise
    give each segment the whole remaining budget."""

    def __init__(self, engine: Any, max_segment_tokens: int) -> None:
        self.engine = engine
        self.max_segment_tokens = max_segment_tokens

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        params = deepcopy(sampling_params)
        params.stop = [END_QUERY]
        params.include_stop_str_in_output = True
        params.max_tokens = min(params.max_tokens or self.max_segment_tokens, self.max_segment_tokens)
        # vLLM derives internal fields (stop-string buffering) from `stop` at construction; redo that.
        if hasattr(params, "__post_init__"):
            params.__post_init__()
        return await self.engine.generate(prompt_token_ids, params, multi_modal_data=multi_modal_data)


def _tensor_logs(logs: dict[str, float]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(float(v)) for k, v in logs.items()}


class SearchAgentInstance(AgentInstanceBase):
    """One episode: OpenRLHF makes a fresh instance per prompt sample."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.runtime = Runtime.current()
        self.episode: Episode | None = None

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        self.episode = Episode(prompt=states["observation"], label=states["label"])
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        assert self.episode is not None, "reset() must run before step()"
        env = self.runtime.environment
        outcome = await env.step(self.episode, states["action_text"])
        if not outcome.done:
            # OpenRLHF adds the step rewards into the episode's; the score stays the outcome's.
            return {
                "rewards": torch.tensor(outcome.reward),
                "scores": torch.tensor(0.0),
                "environment_feedback": outcome.feedback,
                "done": False,
                "extra_logs": {},
            }
        result = await env.finish(self.episode, self.runtime.rewards)
        reward, logs = result.reward, result.extra_logs
        if self.runtime.efficiency is not None:
            correct = logs.get(self.runtime.stage.reward.answer_metric, 0.0) >= 1.0
            bonus = await self.runtime.efficiency.bonus(self.episode.prompt, self.episode.num_searches, correct)
            reward, logs = reward + bonus, {**logs, "efficiency_bonus": bonus}
        if self.runtime.costs is not None:
            penalty = self.runtime.stage.episode.cost_weight * self.runtime.costs.normalised(self.episode.cost)
            reward, logs = reward - penalty, {**logs, "search_cost": self.episode.cost, "cost_penalty": penalty}
        return {
            "rewards": torch.tensor(reward),
            "scores": torch.tensor(result.score),
            "environment_feedback": "",
            "done": True,
            "extra_logs": _tensor_logs(logs),
        }


class SearchAgentExecutor(MultiTurnAgentExecutor):
    """OpenRLHF's multi-turn loop with the search agent and segment-capped generation."""

    stage: str | None = None  # the stage files pin theirs, so a config for the other stage is refused

    def __init__(self) -> None:
        super().__init__(SearchAgentInstance)

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        runtime = Runtime.current()
        if self.stage is not None and runtime.stage.stage != self.stage:
            raise ConfigError(f"{self.stage}/agent_func.py was given a config for {runtime.stage.stage}")
        engine = SegmentEngine(llm_engine, runtime.stage.episode.max_segment_tokens)
        return await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, engine, images)


def load_agent_executor(path: str | Path) -> MultiTurnAgentExecutor:
    """`AgentExecutor()` from an agent file, loaded by path exactly as OpenRLHF's vLLM engine does."""
    spec = importlib.util.spec_from_file_location("agent_module", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: not a loadable Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.AgentExecutor()
