"""A group of episodes caught by a weight sync mid-generation (OpenRLHF's partial rollout), through OpenRLHF's own
agent loop, the vLLM stand-in's sampler (its pause parks a running batch between two tokens), a real retrieval
server and a real reward server: each episode is scored once, the group-level bonus sees the whole group, and
tokens, action ranges, rewards and extra_logs are those of the same group run without a sync."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from copy import deepcopy

import torch

from searchrl.protocols.r1_searcher import BEGIN_DOCS
from searchrl.rehearsal.cpu.sampler import BatchSampler
from searchrl.rollout.agent import Runtime, load_agent_executor
from searchrl.rollout.engines import CompletionOutput, RequestOutput
from searchrl.stage.templates import render_prompt
from tests.conftest import ROOT
from tests.test_agent import ANSWER, QUESTION, SEARCH, model, servers, stage_config, tokenizer  # noqa: F401
from tests.test_cpu_layer import params

SEARCH_AGAIN = " Not enough yet. <|begin_of_query|> Fort Hood shooter <|end_of_query|>"


class Steer:
    """Forces one episode's segments on the sampler's real forward pass, whatever the weights: segment i (the
    number of documents blocks in the context) token by token, then EOS."""

    def __init__(self, tok, prompt: str, segments: list[str]) -> None:
        self.tok = tok
        self.prompt_len = len(tok(prompt, add_special_tokens=False)["input_ids"])
        self.segments = [tok(s, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for s in segments]
        self.start: int | None = None
        self.target: list[int] = []
        self.segment = 0
        self.step = 0
        # (segment, step) at which `hold` runs once, from the sampler's thread: a pause requested there parks the
        # batch at exactly that token (a pause requested from the event loop could arrive after the segment ended).
        self.hold_at: tuple[int, int] | None = None
        self.hold: Callable[[], None] | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.start is None:
            self.start = input_ids.shape[1]
            self.segment = self.tok.decode(input_ids[0, self.prompt_len :]).count(BEGIN_DOCS)
            self.target = self.segments[min(self.segment, len(self.segments) - 1)]
        self.step = input_ids.shape[1] - self.start
        if self.hold is not None and (self.segment, self.step) == self.hold_at:
            self.hold, hold = None, self.hold
            hold()
        forced = torch.full_like(scores, -float("inf"))
        forced[:, self.target[min(self.step, len(self.target) - 1)]] = 0.0
        return forced


class StandInEngine:
    """What OpenRLHF's RolloutRayActor.generate gives the agent, over one stand-in sampler (one per episode, so
    each follows its own script)."""

    def __init__(self, lm, tok, steer: Steer) -> None:
        self.steer = steer
        self.sampler = BatchSampler(lm, tok, 4096, logits_processors=[steer])

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.steer.start = None
        done = await self.sampler.generate(list(prompt_token_ids), deepcopy(sampling_params))
        return RequestOutput([CompletionOutput(done.token_ids, done.text, done.finish_reason)])


def run_group(servers, tokenizer, model, sync_mid_episode: bool):  # noqa: F811
    stage, model_cfg = stage_config(servers, "reward.efficiency_weight=0.5", "reward.efficiency_group_size=4")
    prompt = render_prompt(model_cfg, QUESTION)
    scripts = [[SEARCH, ANSWER], [SEARCH, SEARCH_AGAIN, ANSWER]] * 2
    engines = [StandInEngine(model, tokenizer, Steer(tokenizer, prompt, s)) for s in scripts]
    twice = [e for e, s in zip(engines, scripts, strict=True) if len(s) == 3]
    if sync_mid_episode:
        # The two-search episodes park a few tokens into their second query, as a pause caught them there.
        for e in twice:
            e.steer.hold_at, e.steer.hold = (1, 3), e.sampler._go.clear

    async def group():
        executor = load_agent_executor(ROOT / "stage2_answer/agent_func.py")
        runtime = Runtime.from_stage(stage)
        scored: list[str] = []
        score = runtime.rewards.score

        async def counted(query, prompt, label, metadata=None):
            scored.append(query)
            return await score(query, prompt, label, metadata)

        runtime.rewards.score = counted  # type: ignore[method-assign]
        Runtime.install(runtime)
        try:
            sampling = params(temperature=1.0, max_tokens=None)
            # OpenRLHF's generate_responses: the prompt's samples gathered in one engine process.
            episodes = asyncio.gather(
                *(executor.execute(prompt, "Nidal Hasan", sampling, 4096, tokenizer, e) for e in engines)
            )
            if sync_mid_episode:
                # The partial-rollout sync, as PPOTrainerAsync makes it: pause every engine once the two-search
                # episodes are parked a few tokens into their second query, change the weights, resume.
                while not all(e.sampler.paused and e.sampler.quiet and e.steer.segment == 1 for e in twice):
                    await asyncio.sleep(0.002)
                await asyncio.gather(*(e.sampler.pause() for e in engines))
                parked = [e.steer.step for e in twice]
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(torch.randn_like(p) * 0.01)  # the forced tokens must not depend on the weights
                await asyncio.sleep(0.2)
                assert [e.steer.step for e in twice] == parked  # nothing computed while paused
                for e in engines:
                    e.sampler.version += 1
                    e.sampler.resume()
            return await episodes, scored
        finally:
            Runtime.install(None)
            await runtime.rewards.aclose()
            await runtime.environment.search.aclose()

    results, scored = asyncio.run(group())
    return results, scored, engines


def test_a_group_caught_by_a_weight_sync_is_scored_once_and_whole(servers, tokenizer, model):  # noqa: F811
    before = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        synced, scored, engines = run_group(servers, tokenizer, model, sync_mid_episode=True)
    finally:
        model.load_state_dict(before)  # the module's other tests share the model
    assert sum(e.sampler.across_syncs for e in engines) >= 2 and all(e.sampler.pauses == 1 for e in engines)
    assert len(scored) == 4 and len(set(scored)) == 2  # one reward call per episode, two distinct trajectories
    logs = [{k: float(v) for k, v in r["extra_logs"].items()} for r in synced]
    # The bonus goes to the group's fewest-search right answers: the group was seen whole, across the sync.
    assert [x["efficiency_bonus"] for x in logs] == [0.5, 0.0, 0.5, 0.0]
    assert [r["reward"] for r in synced] == [1.5, 1.0, 1.5, 1.0]
    docs = tokenizer.convert_tokens_to_ids(BEGIN_DOCS)
    for r in synced:
        ranges, tokens = r["action_ranges"], r["observation_tokens"]
        assert len(ranges) in (2, 3)
        assert all(not (a <= i < b) for i, t in enumerate(tokens) if t == docs for a, b in ranges)

    plain, plain_scored, _ = run_group(servers, tokenizer, model, sync_mid_episode=False)
    assert len(plain_scored) == 4
    for a, b in zip(synced, plain, strict=True):
        assert a["observation_tokens"] == b["observation_tokens"] and a["action_ranges"] == b["action_ranges"]
        assert a["reward"] == b["reward"] and float(a["scores"]) == float(b["scores"])
        # The same keys (OpenRLHF stacks them across a batch) and values, but the measured search latency.
        assert a["extra_logs"].keys() == b["extra_logs"].keys()
        same = {k: float(v) for k, v in a["extra_logs"].items() if k != "search_latency_ms"}
        assert same == {k: float(v) for k, v in b["extra_logs"].items() if k != "search_latency_ms"}
