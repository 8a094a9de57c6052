"""The search agent on OpenRLHF's own agent classes (`openrlhf.utils.agent`), no fork.

OpenRLHF builds `AgentExecutor()` in every vLLM engine process; the resolved stage config reaches
those processes inline in $SEARCHRL_CONFIG_JSON (a Ray job's env_vars reach every worker), or for a
local run in the file named by $SEARCHRL_CONFIG, and the HTTP clients are made once per process
(`Runtime.current()`), never per episode.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Sequence
from contextvars import ContextVar
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from searchrl.config import ConfigError, load
from searchrl.episodes.record import EpisodeRecord, label_golds, token_count
from searchrl.episodes.sampler import EpisodeSampler
from searchrl.protocols import TagProtocol, bind_template, get_protocol
from searchrl.protocols.segments import cut_turn
from searchrl.reward.group import EpisodeTerms
from searchrl.rollout.engines import DEFAULT
from searchrl.rollout.environment import Episode, SearchEnvironment
from searchrl.rollout.reward_client import RewardClient
from searchrl.rollout.search_step import open_search_step
from searchrl.stage.config import CONFIG_ENV, CONFIG_JSON_ENV, ModelConfig, StageConfig, episode_share


def config_source() -> str:
    """Where this process finds the resolved stage config: `env_vars` (inline JSON) or `file:PATH`."""
    if os.environ.get(CONFIG_JSON_ENV):
        return "env_vars"
    path = os.environ.get(CONFIG_ENV)
    return f"file:{path}" if path else "none"


def stage_from_env() -> StageConfig:
    inline = os.environ.get(CONFIG_JSON_ENV)
    if inline:
        try:
            return StageConfig.model_validate(json.loads(inline))
        except ValueError as e:
            raise ConfigError(f"${CONFIG_JSON_ENV}: not a valid resolved stage config: {e}") from None
    path = os.environ.get(CONFIG_ENV)
    if not path:
        raise ConfigError(
            f"neither ${CONFIG_JSON_ENV} nor ${CONFIG_ENV} is set: launch/ray_submit.sh puts the resolved stage "
            "config in the job's env_vars; for a local run point ${CONFIG_ENV} at a resolved config file"
        )
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"${CONFIG_ENV}={path}: no such file")
    return StageConfig.model_validate(json.loads(file.read_text(encoding="utf-8")))


@dataclass
class EpisodeState:
    """What one `execute` call knows beyond OpenRLHF's loop: the agent instance it made and whether
    the last segment was cut by the context budget (data.max_len) rather than by the segment cap."""

    instance: SearchAgentInstance | None = None
    budget_limited: bool = False


# Set by SearchAgentExecutor.execute for the episode running in the current asyncio task.
_EPISODE: ContextVar[EpisodeState | None] = ContextVar("searchrl_episode", default=None)


def action_text(token_ids: list[int], tokenizer: Any, stops: Sequence[str] = ()) -> str:
    """The text of the action tokens the policy's context holds. vLLM cuts its `text` at the stop
    string, but keeps the whole token that completed it (e.g. `|>` merged with newlines). A closing end of
    sequence is left out unless it is itself a stop (Llama 3 ends a call with `<|eot_id|>`, its end of turn): the
    tool turn must see that the context already holds it."""
    ids = list(token_ids)
    eos = tokenizer.eos_token_id
    if ids and eos is not None and ids[-1] == eos and tokenizer.eos_token not in stops:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False)


@dataclass
class Runtime:
    """What one engine process shares across its episodes: the config, the environment, the clients."""

    stage: StageConfig
    environment: SearchEnvironment
    rewards: RewardClient
    terms: EpisodeTerms | None = None
    # The episodes kept for the run's viewer; None when the stage keeps none (or names no folder for them).
    episodes: EpisodeSampler | None = None

    _current: ClassVar[Runtime | None] = None

    @classmethod
    def from_stage(cls, stage: StageConfig) -> Runtime:
        rewards = RewardClient(
            stage.reward_server.urls,
            deadline_s=stage.reward_server.deadline_s,
            timeout_s=stage.reward_server.timeout_s,
            token=os.environ.get(stage.reward_server.token_env),
        )
        terms = EpisodeTerms(stage.reward, int(stage.openrlhf.get("rollout.n_samples_per_prompt") or 1))
        protocol = get_protocol(stage.protocol)
        environment = SearchEnvironment(open_search_step(stage.search), stage.episode, stage.reward, protocol)
        return cls(stage, environment, rewards, terms, episode_sampler(stage))

    @classmethod
    def from_env(cls) -> Runtime:
        return cls.from_stage(stage_from_env())

    @classmethod
    def current(cls) -> Runtime:
        if cls._current is None:
            cls._current = cls.from_env()
        return cls._current

    @classmethod
    def install(cls, runtime: Runtime | None) -> None:
        """Make `runtime` the process's runtime (tests and the quickstart build their own)."""
        cls._current = runtime


def episode_sampler(stage: StageConfig) -> EpisodeSampler | None:
    """The stage's sample of episodes, in the folder its plan made absolute (searchrl/job/plan.py). A config that no
    plan resolved (a test's, the quickstart's) names none, and keeps none rather than write under runs/."""
    kept = stage.episodes
    if not kept.per_step or kept.dir is None:
        return None
    return EpisodeSampler(kept.dir, kept.per_step, episode_share(stage.openrlhf), kept.max_windows)


def template_kwargs(stage: StageConfig) -> dict[str, Any]:
    """The chat-template switches of the stage's policy (its model config's), for a protocol whose environment turns
    the template renders (tool-call); {} for the others, which need no model config in the engine process."""
    if get_protocol(stage.protocol).TOOLS is None:
        return {}
    return dict(load(ModelConfig, stage.model).chat_template_kwargs)


class SegmentEngine:
    """Wraps the engine OpenRLHF passes in so every segment stops at the protocol's search action (kept in the
    output) and stays within the per-segment token cap; OpenRLHF's multi-turn loop would otherwise
    give each segment the whole remaining budget."""

    def __init__(
        self,
        engine: Any,
        max_segment_tokens: int,
        tokenizer: Any = None,
        state: EpisodeState | None = None,
        stop_after_answer: bool = False,
        protocol: TagProtocol = DEFAULT,
    ) -> None:
        self.engine = engine
        self.max_segment_tokens = max_segment_tokens
        self.stops = protocol.stops(stop_after_answer)
        self.cut_after = protocol.CUT_AFTER
        self.tokenizer = tokenizer
        self.state = state

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        params = deepcopy(sampling_params)
        budget = params.max_tokens  # OpenRLHF sets what is left of data.max_len
        params.stop = list(self.stops)
        params.include_stop_str_in_output = True
        params.max_tokens = min(budget or self.max_segment_tokens, self.max_segment_tokens)
        # vLLM derives internal fields (stop-string buffering) from `stop` at construction; redo that.
        if hasattr(params, "__post_init__"):
            params.__post_init__()
        out = await self.engine.generate(prompt_token_ids, params, multi_modal_data=multi_modal_data)
        completion = out.outputs[0]
        if self.tokenizer is not None:
            completion.text = action_text(completion.token_ids, self.tokenizer, self.stops)
            if cut_turn(completion.text, self.stops, self.cut_after) != completion.text:
                self._cut(completion)
        if self.state is not None:
            self.state.budget_limited = (
                completion.finish_reason == "length" and budget is not None and budget <= self.max_segment_tokens
            )
        return out

    def _cut(self, completion: Any) -> None:
        """Keep the tokens up to the one that completes `cut_after` (as a stop string would), their logprobs with
        them, so the trained tokens are the turn Search-R1 keeps."""
        ids = list(completion.token_ids)
        assert self.cut_after is not None
        low, high = 1, len(ids)
        while low < high:  # the shortest prefix whose text holds the tag
            mid = (low + high) // 2
            if self.cut_after in action_text(ids[:mid], self.tokenizer, self.stops):
                high = mid
            else:
                low = mid + 1
        completion.token_ids = ids[:low]
        if completion.logprobs is not None:
            completion.logprobs = completion.logprobs[:low]
        completion.text = action_text(ids[:low], self.tokenizer, self.stops)
        completion.finish_reason = "stop"


def _tensor_logs(logs: dict[str, float]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(float(v)) for k, v in logs.items()}


class SearchAgentInstance(AgentInstanceBase):
    """One episode: OpenRLHF makes a fresh instance per prompt sample."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.runtime = Runtime.current()
        self.episode: Episode | None = None
        self.started = time.monotonic()
        # Where each block the environment appended lies in the solution; None once one was not a plain append.
        self.observations: list[tuple[int, int]] | None = []
        self.finished = False
        self.state = _EPISODE.get()
        if self.state is not None:
            self.state.instance = self

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        self.episode = Episode(prompt=states["observation"], label=states["label"])
        self.started = time.monotonic()
        self.observations = []
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        assert self.episode is not None, "reset() must run before step()"
        env = self.runtime.environment
        outcome = await env.step(self.episode, states["action_text"])
        self.observed(outcome.feedback)
        if not outcome.done:
            # No reward per step: OpenRLHF sums step rewards into the episode's one scalar anyway, and the
            # process term needs the outcome (environment.finish).
            return {
                "rewards": torch.tensor(0.0),
                "scores": torch.tensor(0.0),
                "environment_feedback": outcome.feedback,
                "done": False,
                "extra_logs": {},
            }
        return await self.finish(budget_cut=self.state is not None and self.state.budget_limited)

    async def finish(self, budget_cut: bool) -> dict:
        """Score the episode as it stands: at its final step, or after OpenRLHF's loop ran out of
        context budget before one. Every episode returns the same extra_logs keys, which OpenRLHF's
        split_experience_batch requires of a batch."""
        assert self.episode is not None, "reset() must run before finish()"
        self.finished = True
        result = await self.runtime.environment.finish(self.episode, self.runtime.rewards, budget_cut=budget_cut)
        reward, logs = result.reward, result.extra_logs
        if self.runtime.terms is not None:
            ep = self.episode
            reward, logs = await self.runtime.terms.settle(reward, logs, ep.prompt, ep.num_searches, ep.cost)
        if self.runtime.episodes is not None:
            self.runtime.episodes.offer(lambda: self.record(reward, result.score, logs))
        return {
            "rewards": torch.tensor(reward),
            "scores": torch.tensor(result.score),
            "environment_feedback": "",
            "done": True,
            "extra_logs": _tensor_logs(logs),
        }

    def observed(self, feedback: str) -> None:
        if not feedback or self.observations is None or self.episode is None:
            return
        end = len(self.episode.solution)
        if self.episode.solution.endswith(feedback):
            self.observations.append((end - len(feedback), end))
        else:
            self.observations = None  # the record's reader falls back to the protocol's tags

    def record(self, reward: float, score: float, logs: dict[str, float]) -> EpisodeRecord:
        """The finished episode as the run keeps it (searchrl/episodes/record.py)."""
        assert self.episode is not None
        ep, runtime = self.episode, self.runtime
        tokenizer = runtime.environment.tokenizer
        return EpisodeRecord(
            time=time.time(),
            source=runtime.stage.episodes.source,
            protocol=runtime.stage.protocol,
            prompt=ep.prompt,
            solution=ep.solution,
            answer=runtime.environment.protocol.policy_answer(ep.solution),
            gold=label_golds(ep.label),
            reward=float(reward),
            score=float(score),
            components={k: float(v) for k, v in logs.items()},
            queries=list(ep.queries),
            prompt_tokens=token_count(tokenizer, ep.prompt),
            response_tokens=token_count(tokenizer, ep.solution),
            seconds=time.monotonic() - self.started,
            search_seconds=ep.search_seconds,
            observations=self.observations,
        )


class SearchAgentExecutor(MultiTurnAgentExecutor):
    """OpenRLHF's multi-turn loop with the search agent and segment-capped generation."""

    stage: str | None = None  # the stage files pin theirs, so a config for the other stage is refused

    def __init__(self) -> None:
        super().__init__(SearchAgentInstance)

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        runtime = Runtime.current()
        if self.stage is not None and runtime.stage.stage != self.stage:
            raise ConfigError(f"{self.stage}/agent_func.py was given a config for {runtime.stage.stage}")
        if runtime.environment.tokenizer is None:
            runtime.environment.tokenizer = hf_tokenizer
            runtime.environment.protocol = bind_template(
                runtime.environment.protocol, hf_tokenizer, template_kwargs(runtime.stage)
            )
        state = EpisodeState()
        token = _EPISODE.set(state)
        try:
            episode = runtime.stage.episode
            engine = SegmentEngine(
                llm_engine,
                episode.max_segment_tokens,
                hf_tokenizer,
                state,
                episode.stop_after_answer,
                runtime.environment.protocol,
            )
            result = await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, engine, images)
        finally:
            _EPISODE.reset(token)
        instance = state.instance
        if instance is not None and not instance.finished:
            # OpenRLHF left its loop at data.max_len without a final step: without this the episode
            # would carry no outcome reward (a reward hole) and no extra_logs (a crash downstream).
            final = await instance.finish(budget_cut=True)
            result["reward"] += final["rewards"].item()
            result["scores"] = final["scores"]
            result["extra_logs"] = final["extra_logs"]
        return result


def load_agent_executor(path: str | Path) -> MultiTurnAgentExecutor:
    """`AgentExecutor()` from an agent file, loaded by path exactly as OpenRLHF's vLLM engine does."""
    spec = importlib.util.spec_from_file_location("agent_module", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: not a loadable Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.AgentExecutor()
