"""Generation engines with the coroutine OpenRLHF's vLLM engine offers:
`generate(prompt_token_ids, sampling_params, multi_modal_data=None)` returning an object whose
`outputs[0]` has `token_ids`, `text`, `finish_reason` and `logprobs`.

`HFEngine` runs a Hugging Face transformers model (a tiny one on CPU in tests and the quickstart);
`ReplayEngine` re-emits the recorded actions of released trajectories, so the environment, search
and reward run live on real model behaviour without a GPU.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from searchrl.protocols import DEFAULT_PROTOCOL, TagProtocol, get_protocol
from searchrl.protocols.segments import policy_segments

DEFAULT = get_protocol(DEFAULT_PROTOCOL)


@dataclass
class SamplingParams:
    """The fields of vLLM's SamplingParams that the agent loop and the engines here use."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = None
    min_tokens: int = 0
    skip_special_tokens: bool = True
    stop: list[str] | None = None
    include_stop_str_in_output: bool = False
    logprobs: int | None = None
    seed: int | None = None


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: Any = None


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput] = field(default_factory=list)


def _cut_at_stop(text: str, stops: Sequence[str], keep: bool) -> tuple[str, bool]:
    hits = [(text.find(s), s) for s in stops if s and s in text]
    if not hits:
        return text, False
    at, stop = min(hits)
    return text[: at + (len(stop) if keep else 0)], True


class HFEngine:
    """A transformers causal LM behind the vLLM-like coroutine; generation runs in a worker thread.

    One lock, shared by every instance, serialises calls: a CPU model gains nothing from overlapping
    them, and `generate` is not re-entrant. `steer(prompt_token_ids)` may return logits processors
    for one call, which lets tests drive a random model through the real forward pass.
    """

    def __init__(self, model: Any, tokenizer: Any, steer: Callable[[list[int]], list[Any]] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.steer = steer

    _lock = threading.Lock()

    def _generate(self, prompt_token_ids: list[int], params: Any) -> RequestOutput:
        import torch
        from transformers import LogitsProcessorList

        max_new = int(params.max_tokens or 64)
        ids = torch.tensor([prompt_token_ids], dtype=torch.long)
        sample = (params.temperature or 0.0) > 0
        with self._lock, torch.no_grad():
            if params.seed is not None:
                torch.manual_seed(params.seed)
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new,
                do_sample=sample,
                temperature=params.temperature if sample else None,
                top_p=params.top_p if sample else None,
                logits_processor=LogitsProcessorList(self.steer(prompt_token_ids) if self.steer else []),
                stop_strings=list(params.stop or []) or None,
                tokenizer=self.tokenizer,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
        new = out[0, len(prompt_token_ids) :].tolist()
        text = self.tokenizer.decode(new, skip_special_tokens=False)
        kept, stopped = _cut_at_stop(text, params.stop or [], params.include_stop_str_in_output)
        if stopped:
            # Keep the tokens up to the stop string, as vLLM does.
            for n in range(1, len(new) + 1):
                if self.tokenizer.decode(new[:n], skip_special_tokens=False).startswith(kept):
                    new = new[:n]
                    break
            return RequestOutput([CompletionOutput(new, kept, "stop")])
        eos = self.tokenizer.eos_token_id
        if eos is not None and new and new[-1] == eos:
            return RequestOutput([CompletionOutput(new, text, "stop")])
        return RequestOutput([CompletionOutput(new, text, "length" if len(new) >= max_new else "stop")])

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None):
        return await asyncio.to_thread(self._generate, list(prompt_token_ids), sampling_params)


def recorded_actions(trajectory: str, protocol: TagProtocol = DEFAULT) -> list[str]:
    """The model's own segments of a recorded trajectory: the text up to each search action's close,
    with the documents the environment returned then left out, and the final segment."""
    return policy_segments(trajectory, protocol.SEARCH_CLOSE, protocol.DOCUMENTS_OPEN, protocol.DOCUMENTS_CLOSE)


class ReplayEngine:
    """Re-emits recorded actions: for a prompt it knows, segment i is the i-th recorded action, where
    i is the number of documents blocks the environment has appended so far."""

    def __init__(self, tokenizer: Any, recordings: dict[str, str], protocol: TagProtocol = DEFAULT) -> None:
        self.tokenizer = tokenizer
        self.protocol = protocol
        self.actions = {prompt: recorded_actions(traj, protocol) for prompt, traj in recordings.items()}

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None):
        observed = self.tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        prompt = next((p for p in self.actions if observed.startswith(p)), None)
        if prompt is None:
            raise KeyError("ReplayEngine: no recording for this prompt")
        steps = self.actions[prompt]
        i = min(observed[len(prompt) :].count(self.protocol.DOCUMENTS_OPEN), len(steps) - 1)
        text = steps[i]
        tokens = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        limit = sampling_params.max_tokens
        if limit is not None and len(tokens) > limit:
            tokens = tokens[:limit]
            return RequestOutput([CompletionOutput(tokens, self.tokenizer.decode(tokens), "length")])
        return RequestOutput([CompletionOutput(tokens, text, "stop")])
