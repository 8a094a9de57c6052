"""The job `launch/ray_submit.sh STAGE --rehearse` submits: a training step's rollout half, on CPU.

It runs inside `ray job submit` with the runtime_env of a real submit (same upload, excludes and
env_vars) and takes the same `train_ppo_ray` flags, checked and nested by OpenRLHF's own code. Then,
as OpenRLHF's trainer does: engines (Ray actors) load the agent from `--train.agent_func_path` the
way OpenRLHF's vLLM actor does; OpenRLHF's PromptDataset and SamplesGenerator send the prompts;
OpenRLHF's MultiTurnAgentExecutor (through our agent) runs the episodes against the live servers;
OpenRLHF's experience maker and replay buffer turn the samples into training batches. What stands
in: a CPU engine for vLLM (it re-emits recorded R1-Searcher actions token by token, cutting at stop
strings as vLLM does), a zero log-prob forward for the DeepSpeed models, and a tiny tokenizer.
Prints one `SEARCHRL_REHEARSAL {json}` line with every episode and the checks.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import sys
import types
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import ray
import torch

from searchrl.config import load
from searchrl.protocols import DEFAULT_PROTOCOL, TagProtocol, bind_template, get_protocol
from searchrl.rehearsal.openrlhf_source import experience_maker_class
from searchrl.rollout.agent import config_source, stage_from_env
from searchrl.rollout.engines import CompletionOutput, RequestOutput, SamplingParams, recorded_actions
from searchrl.stage.config import ModelConfig
from searchrl.stage.openrlhf_flags import validated_args
from searchrl.stage.templates import load_tokenizer
from searchrl.tiny_policy.model import build_tokenizer

DEFAULT = get_protocol(DEFAULT_PROTOCOL)

MARKER = "SEARCHRL_REHEARSAL "


def install_vllm_standin() -> bool:
    """OpenRLHF's samples generator imports vLLM at module level, for SamplingParams and its engine
    module's helpers. Where vLLM is not installed, a module with just those names stands in; the
    SamplingParams it offers is searchrl.rollout.engines', importable in every worker."""
    if "vllm" in sys.modules or importlib.util.find_spec("vllm") is not None:
        return False  # the real vLLM, or the stand-in already installed
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    vllm.__version__ = "0.0.0+searchrl.cpu"  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict  # type: ignore[attr-defined]
    utils = types.ModuleType("vllm.utils")
    utils.random_uuid = lambda: uuid.uuid4().hex  # type: ignore[attr-defined]
    vllm.inputs, vllm.utils = inputs, utils  # type: ignore[attr-defined]
    sys.modules.update({"vllm": vllm, "vllm.inputs": inputs, "vllm.utils": utils})
    # openrlhf.trainer.ray.__init__ would import DeepSpeed-free but vLLM-heavy modules; only the
    # batch call helper is needed by the samples generator.
    engine = types.ModuleType("openrlhf.trainer.ray.vllm_engine")
    package = types.ModuleType("openrlhf.trainer.ray")
    package.__path__ = []  # type: ignore[attr-defined]

    def batch_vllm_engine_call(engines: list[Any], method_name: str, *args: Any, **kwargs: Any) -> Any:
        return ray.get([getattr(e, method_name).remote(*args, **kwargs) for e in engines])

    engine.batch_vllm_engine_call = batch_vllm_engine_call  # type: ignore[attr-defined]
    package.vllm_engine = engine  # type: ignore[attr-defined]
    sys.modules.setdefault("openrlhf.trainer.ray", package)
    sys.modules.setdefault("openrlhf.trainer.ray.vllm_engine", engine)
    return True


class ReplayVllmEngine:
    """Re-emits a recorded trajectory's actions the way vLLM generates: token by token, stopping on
    the first token that completes a stop string (kept whole, text cut at the stop string), at
    `max_tokens` ("length"), or with EOS after the final action."""

    def __init__(self, tokenizer: Any, recordings: dict[str, str], protocol: TagProtocol = DEFAULT) -> None:
        self.tokenizer = tokenizer
        self.protocol = protocol
        self.actions = {prompt: recorded_actions(text, protocol) for prompt, text in recordings.items()}

    def _continuation(self, observed: str) -> tuple[list[int], bool]:
        prompt = max((p for p in self.actions if observed.startswith(p)), key=len, default=None)
        if prompt is None:
            raise KeyError("no recording for this prompt")
        steps = self.actions[prompt]
        i = min(observed[len(prompt) :].count(self.protocol.DOCUMENTS_OPEN), len(steps) - 1)
        last = i == len(steps) - 1
        # A query is followed by the newlines R1-Searcher's policy wrote before the documents; a
        # tokenizer that merges `|>` with them yields one token that runs past the stop string.
        text = steps[i] if last else steps[i] + "\n\n"
        return self.tokenizer(text, add_special_tokens=False)["input_ids"], last

    async def generate(self, prompt_token_ids: list[int], params: Any, multi_modal_data: Any = None) -> Any:
        observed = self.tokenizer.decode(list(prompt_token_ids), skip_special_tokens=False)
        tokens, last = self._continuation(observed)
        limit = params.max_tokens if params.max_tokens is not None else len(tokens) + 1
        stops = list(params.stop or [])
        out: list[int] = []
        for tok in tokens[:limit]:
            out.append(tok)
            text = self.tokenizer.decode(out, skip_special_tokens=False)
            hits = [(text.find(s), s) for s in stops if s in text]
            if hits:
                at, stop = min(hits)
                kept = text[: at + len(stop)] if params.include_stop_str_in_output else text[:at]
                return RequestOutput([CompletionOutput(out, kept, "stop", self._logprobs(out, params))])
        text = self.tokenizer.decode(out, skip_special_tokens=False)
        if len(out) < len(tokens) or (not last and len(out) >= limit):
            return RequestOutput([CompletionOutput(out, text, "length", self._logprobs(out, params))])
        if len(out) < limit:
            out = [*out, self.tokenizer.eos_token_id]
        return RequestOutput([CompletionOutput(out, text, "stop", self._logprobs(out, params))])

    @staticmethod
    def _logprobs(tokens: list[int], params: Any) -> Any:
        if getattr(params, "logprobs", None) is None:
            return None
        return [{t: types.SimpleNamespace(logprob=0.0)} for t in tokens]


@ray.remote
class CpuRolloutActor:
    """Stands in for OpenRLHF's vLLM `RolloutRayActor`: the methods SamplesGenerator calls, the agent
    loaded from the agent file exactly as OpenRLHF's actor loads it, in a Ray worker process of the job."""

    def __init__(self, agent_func_path: str, recordings: dict[str, str], tokenizer: Any) -> None:
        from openrlhf.utils.agent import AgentExecutorBase

        spec = importlib.util.spec_from_file_location("agent_module", agent_func_path)
        assert spec is not None and spec.loader is not None, f"{agent_func_path}: not loadable"
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert issubclass(module.AgentExecutor, AgentExecutorBase), "AgentExecutor must inherit AgentExecutorBase"
        self.executor = module.AgentExecutor()
        stage = stage_from_env()
        model = load(ModelConfig, stage.model)
        # Replayed in the bound template's form, as the rehearsal wrote the recordings (rehearsal/episodes.py).
        protocol = bind_template(get_protocol(stage.protocol), tokenizer, model.chat_template_kwargs)
        self.engine = ReplayVllmEngine(tokenizer, recordings, protocol)
        self.unfinished = 0

    def where(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "config_source": config_source(), "cwd": os.getcwd()}

    def get_num_unfinished_requests(self) -> int:
        return self.unfinished

    def wake_up(self, tags: Any = None) -> None:
        return None

    def sleep(self, level: int = 1) -> None:
        return None

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        self.unfinished += 1
        try:
            return await self.engine.generate(prompt_token_ids, sampling_params, multi_modal_data)
        finally:
            self.unfinished -= 1

    async def generate_responses(
        self,
        prompt: str,
        label: str,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        num_samples: int = 1,
        images: Any = None,
    ) -> list[dict[str, Any]]:
        # As OpenRLHF's actor: one executor call per sample, this actor as the engine.
        tasks = [
            self.executor.execute(
                prompt=prompt,
                label=label,
                sampling_params=sampling_params,
                max_length=max_length,
                hf_tokenizer=hf_tokenizer,
                llm_engine=self,
                images=images,
            )
            for _ in range(num_samples)
        ]
        return await asyncio.gather(*tasks)


@ray.remote
class ZeroForwardActor:
    """Stands in for the DeepSpeed actor/reference/critic models' forward: log-probs (values) of the right shape."""

    def forward(self, sequences: list[Any], action_mask: list[Any], attention_mask: list[Any], **kwargs: Any):
        return [torch.zeros(m.shape, dtype=torch.float32) for m in action_mask]

    def empty_cache(self) -> None:
        return None


class CpuModelGroup:
    """The two methods of OpenRLHF's RayActorGroup that the experience maker calls."""

    def __init__(self) -> None:
        self.actor = ZeroForwardActor.options(num_cpus=0).remote()

    def async_run_method_batch(self, method_name: str, **kwargs: Any) -> list[Any]:
        return [getattr(self.actor, method_name).remote(**kwargs)]

    def async_run_method(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        return [getattr(self.actor, method_name).remote(*args, **kwargs)]


class CpuStrategy:
    """What PromptDataset, blending_datasets, the samples generator and the experience maker use of
    OpenRLHF's DeepspeedStrategy."""

    def __init__(self, args: Any) -> None:
        self.args = args

    def is_rank_0(self) -> bool:
        return True

    def print(self, *msg: Any) -> None:
        print(*msg, flush=True)


def episode_row(sample: Any, tokenizer: Any) -> dict[str, Any]:
    info = {k: float(v.flatten()[0]) for k, v in sample.info.items() if isinstance(v, torch.Tensor)}
    text = tokenizer.decode(sample.sequences[0].tolist(), skip_special_tokens=False)
    prompt = sample.prompts[0]
    return {
        "prompt": prompt,
        # The policy's text with the documents as they were appended (the decoded sequence after the prompt).
        "response": text[text.find(prompt) + len(prompt) :] if prompt in text else text,
        # The question follows `User:` in the base template, `Question:` in Router-R1's prompt.
        "question": re.split(r"User:|Question:", sample.prompts[0])[-1].strip().split("\n")[0][:60],
        "label": sample.labels[0],
        "reward": info.get("reward"),
        "score": info.get("score"),
        "budget_cut": bool(info.get("budget_cut", 0.0)),
        "searches": int(info.get("num_searches", 0)),
        "tokens": int(sample.total_length.item()),
        "truncated": bool(sample.truncated.item()),
        "answered": "<answer>" in text[len(sample.prompts[0]) :],
        "keys": sorted(sample.info),
    }


def run(args: argparse.Namespace, train_args: list[str]) -> dict[str, Any]:
    install_vllm_standin()
    from openrlhf.datasets import PromptDataset
    from openrlhf.datasets.utils import blending_datasets
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from torch.utils.data import DataLoader

    flags = validated_args(train_args)  # OpenRLHF's parser, nesting and checks
    ray.init(logging_level="WARNING")
    recordings = json.loads(Path(args.recordings).read_text(encoding="utf-8"))
    tokenizer = build_tokenizer(
        [*recordings, *recordings.values()], vocab_size=args.vocab_size, protocol_tokens=False, qwen_split=True
    )
    model = load(ModelConfig, stage_from_env().model)
    if model.kind == "chat":
        # The policy's chat template and end of turn, as its own tokenizer carries them in a real job: the
        # environment renders the tool-call protocol's tool turns with it, and a Llama 3 call ends at its end of turn.
        own = load_tokenizer(model)
        tokenizer.chat_template = own.chat_template
        if own.eos_token and own.eos_token != tokenizer.eos_token:
            tokenizer.add_special_tokens({"eos_token": own.eos_token})
    strategy = CpuStrategy(flags)
    data = blending_datasets(flags.data.prompt_dataset, flags.data.prompt_probs, strategy, flags.train.seed)
    dataset = PromptDataset(data, tokenizer, strategy, input_template=flags.data.input_template)
    loader = DataLoader(dataset, batch_size=1, shuffle=False, collate_fn=dataset.collate_fn)
    engines = [
        CpuRolloutActor.options(num_cpus=0).remote(flags.train.agent_func_path, recordings, tokenizer)
        for _ in range(max(1, min(flags.vllm.num_engines or 1, 2)))
    ]
    where = ray.get([e.where.remote() for e in engines])
    generator = SamplesGenerator(strategy, loader, None, tokenizer, engines)
    generate_kwargs = {
        "do_sample": True,
        "max_len": flags.data.max_len,
        "max_new_tokens": flags.rollout.max_new_tokens,
        "temperature": flags.rollout.temperature,
        "top_p": flags.rollout.top_p,
    }
    samples: list[Any] = []
    exhausted = False
    while len(samples) < args.episodes and not exhausted:
        batch, _, _, exhausted = generator.generate_samples(**generate_kwargs)
        samples.extend(batch)
    rows = [episode_row(s, tokenizer) for s in samples]
    batches_ok, batch_error, train_batches = _experience_batches(flags, samples, strategy, tokenizer)
    rewards = [r["reward"] for r in rows if r["reward"] is not None]
    return {
        "episodes": len(rows),
        "finished": sum(not r["budget_cut"] for r in rows),
        "budget_cut": sum(r["budget_cut"] for r in rows),
        "scored": sum(r["reward"] is not None and r["score"] is not None for r in rows),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "min_reward": min(rewards) if rewards else None,
        "extra_logs_keys_consistent": len({tuple(r["keys"]) for r in rows}) == 1,
        "experience_batches_ok": batches_ok,
        "experience_error": batch_error,
        "train_micro_batches": train_batches,
        "config_source": sorted({w["config_source"] for w in where}),
        "engine_pids": [w["pid"] for w in where],
        "driver_pid": os.getpid(),
        "max_len": flags.data.max_len,
        "max_new_tokens": flags.rollout.max_new_tokens,
        "rows": [{k: v for k, v in r.items() if k != "keys"} for r in rows],
        "keys": rows[0]["keys"] if rows else [],
    }


def _experience_batches(
    flags: Any, samples: list[Any], strategy: CpuStrategy, tokenizer: Any
) -> tuple[bool, str | None, int]:
    """OpenRLHF's trainer: experience maker over the rollout batch, then each actor's replay buffer. Returns whether
    every sample came through as micro-batches, the error that stopped them, and how many micro-batches there are."""
    from openrlhf.trainer.ppo_utils import FixedKLController, NaiveReplayBuffer
    from torch.utils.data import DataLoader

    ref = CpuModelGroup() if flags.algo.kl.init_coef > 0 or flags.algo.kl.use_loss else None
    # GAE needs a critic's values: zeros of the right shape, as the actor's log-probs are.
    critic = CpuModelGroup() if flags.algo.advantage.estimator == "gae" else None
    maker = experience_maker_class()(
        CpuModelGroup(), critic, None, ref, FixedKLController(flags.algo.kl.init_coef), strategy, tokenizer
    )
    batches_ok, batch_error, train_batches = False, None, 0
    try:
        experiences = maker.make_experience_batch(samples)
        with mock.patch("torch.cuda.current_device", return_value=0):  # the buffer names its GPU
            buffer = NaiveReplayBuffer(flags.train.micro_batch_size, 0, True, flags.ds.packing_samples, False)
        for experience in experiences:
            buffer.append(experience)
        loader = DataLoader(buffer, batch_size=buffer.sample_batch_size, collate_fn=buffer.collate_fn)
        train_batches = sum(1 for _ in loader)
        batches_ok = len(buffer) == len(samples) and train_batches > 0
    except (ValueError, TypeError, RuntimeError) as e:
        batch_error = f"{type(e).__name__}: {e}"
    return batches_ok, batch_error, train_batches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m searchrl.rehearsal.job", description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, required=True, help="episodes to run (rounded up to whole prompt groups)")
    p.add_argument("--recordings", required=True, help="JSON {prompt: recorded trajectory} for the replay engine")
    p.add_argument("--vocab-size", type=int, default=4000)
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then the train_ppo_ray flags")
    args = p.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    result = run(args, train_args)
    print(MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    # Import this file as its package module, so Ray pickles the actor classes by reference.
    from searchrl.rehearsal import job as rehearsal_job

    sys.exit(rehearsal_job.main())
