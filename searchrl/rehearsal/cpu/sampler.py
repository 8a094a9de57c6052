"""A Hugging Face sampler with vLLM's request semantics, batching the requests that arrive together.

What vLLM guarantees and OpenRLHF's agent loop relies on, kept here:
- a stop string ends the request on the token that completes it; `token_ids` keep that whole token,
  `text` is cut after the stop string (`include_stop_str_in_output`) or before it, `stop_reason` names it;
- EOS (or a `stop_token_ids` entry) ends it with the token kept in `token_ids` and left out of `text`;
- `max_tokens` ends it with `finish_reason="length"`; no stop or EOS before `min_tokens`;
- log-probs per generated token, of the raw distribution or of the processed one (temperature, top-p,
  top-k) as the engine's `logprobs_mode` says.
Requests waiting together run as one left-padded `generate` in a worker thread, so the event loop keeps
serving the agent's searches and rewards while the CPU samples.

`pause()` / `resume()` are vLLM's pause and resume of generation (`mode="keep"`), which OpenRLHF's partial
rollout wraps each weight sync in: no new batch starts while paused, and a running one parks between two tokens
and goes on after `resume()` with the weights it then finds. Unlike vLLM, the tokens before the pause stay in
the cache as they were computed (vLLM recomputes them): the request still holds tokens of two weight versions.
"""

from __future__ import annotations

import asyncio
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

# How long the first request of a batch waits for others: the agent's episodes come back from search
# and reward calls a few milliseconds apart, and one batched step costs about what one request's does.
BATCH_WINDOW_S = 0.02
MAX_BATCH = 64


@dataclass
class Completion:
    token_ids: list[int]
    text: str
    finish_reason: str
    stop_reason: str | int | None
    logprobs: list[dict[int, float]] | None
    cumulative_logprob: float | None


@dataclass
class _Request:
    prompt: list[int]
    params: Any
    future: asyncio.Future = field(repr=False)


def _key(params: Any) -> tuple:
    """Requests sampled with the same settings can share one generate call."""
    return (
        float(params.temperature),
        float(params.top_p),
        int(params.top_k),
        int(params.min_tokens),
        tuple(params.stop or ()),
        tuple(params.stop_token_ids or ()),
        bool(params.ignore_eos),
        params.logprobs is not None,
    )


class BatchSampler:
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_model_len: int,
        logprobs_mode: str = "raw_logprobs",
        logits_processors: list[Any] | None = None,
    ) -> None:
        """`logits_processors` steer every generate call (tests script a random model's output with one)."""
        self.model = model
        self.logits_processors = list(logits_processors or [])
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.processed_logprobs = logprobs_mode.startswith("processed")
        self.pending: list[_Request] = []
        self.running = 0
        self._worker: asyncio.Task | None = None
        self._go = threading.Event()  # cleared while paused: a running batch parks at its next token
        self._go.set()
        self._parked = threading.Event()
        self.pauses = 0
        self.version = 0  # weight syncs so far (the engine's worker counts them)
        self.across_syncs = 0  # requests that held tokens of more than one weight version

    @property
    def paused(self) -> bool:
        return not self._go.is_set()

    @property
    def quiet(self) -> bool:
        """Nothing is computing: no batch runs, or the running one is parked."""
        return self.running == 0 or self._parked.is_set()

    async def pause(self) -> None:
        """Returns once nothing computes, so the weights can be changed underneath."""
        self._go.clear()
        self.pauses += 1
        while not self.quiet:
            await asyncio.sleep(0.002)

    def resume(self) -> None:
        self._go.set()

    def _gate(self, input_ids: Any, scores: Any) -> Any:
        """A logits processor: the point between two tokens where a paused batch waits."""
        if not self._go.is_set():
            self._parked.set()
            self._go.wait()
            self._parked.clear()
        return scores

    @property
    def unfinished(self) -> int:
        return len(self.pending) + self.running

    async def generate(self, prompt: list[int], params: Any) -> Completion:
        if len(prompt) >= self.max_model_len:
            raise ValueError(f"prompt of {len(prompt)} tokens does not fit max_model_len={self.max_model_len}")
        request = _Request(list(prompt), params, asyncio.get_running_loop().create_future())
        self.pending.append(request)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await request.future

    async def _drain(self) -> None:
        while self.pending:
            await asyncio.sleep(BATCH_WINDOW_S)
            while self.paused:  # no batch starts while paused
                await asyncio.sleep(BATCH_WINDOW_S)
            key = _key(self.pending[0].params)
            batch = [r for r in self.pending if _key(r.params) == key][:MAX_BATCH]
            self.pending = [r for r in self.pending if r not in batch]
            self.running = len(batch)
            version = self.version
            try:
                results = await asyncio.to_thread(self._generate, batch)
                self.across_syncs += len(batch) if self.version != version else 0
            except Exception as e:  # one failed batch fails its requests, not the engine
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(e)
            else:
                for r, result in zip(batch, results, strict=True):
                    if not r.future.done():
                        r.future.set_result(result)
            finally:
                self.running = 0

    def _limit(self, r: _Request) -> int:
        room = self.max_model_len - len(r.prompt)
        return max(1, min(r.params.max_tokens or room, room))

    @torch.no_grad()
    def _generate(self, batch: list[_Request]) -> list[Completion]:
        from transformers import GenerationConfig, LogitsProcessorList

        params = batch[0].params
        limits = [self._limit(r) for r in batch]
        width = max(len(r.prompt) for r in batch)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, width - len(r.prompt) :] = torch.tensor(r.prompt)
            mask[i, width - len(r.prompt) :] = 1
        eos = [] if params.ignore_eos else [self.tokenizer.eos_token_id, *params.stop_token_ids]
        greedy = params.temperature == 0
        config = GenerationConfig(
            max_new_tokens=max(limits),
            min_new_tokens=params.min_tokens or None,
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy or params.top_p >= 1 else params.top_p,
            top_k=None if greedy or params.top_k <= 0 else params.top_k,
            eos_token_id=eos or None,
            pad_token_id=pad,
            stop_strings=list(params.stop) or None,
            return_dict_in_generate=True,
            output_scores=params.logprobs is not None,
            output_logits=params.logprobs is not None,
        )
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=config,
            logits_processor=LogitsProcessorList([*self.logits_processors, self._gate]),
            tokenizer=self.tokenizer if params.stop else None,
        )
        generated = out.sequences[:, width:]
        steps = None
        if params.logprobs is not None:
            steps = out.scores if self.processed_logprobs else out.logits
        return [self._complete(r, generated[i].tolist(), limits[i], steps, i, set(eos)) for i, r in enumerate(batch)]

    def _complete(self, r: _Request, tokens: list[int], limit: int, steps: Any, row: int, eos: set[int]) -> Completion:
        params = r.params
        tokens = tokens[:limit]
        end, reason, stop = len(tokens), "length", None
        for i, tok in enumerate(tokens):
            if tok in eos and i + 1 >= (params.min_tokens or 0):
                end, reason, stop = i + 1, "stop", None if tok == self.tokenizer.eos_token_id else tok
                break
        stop_at = self._stop_string_end(tokens[:end], list(params.stop or []))
        if stop_at is not None:
            end, reason, stop = stop_at[0], "stop", stop_at[1]
        kept = tokens[:end]
        if (reason == "stop" and stop is None) or isinstance(stop, int):
            text = self.tokenizer.decode(kept[:-1], skip_special_tokens=params.skip_special_tokens)
        else:
            text = self.tokenizer.decode(kept, skip_special_tokens=params.skip_special_tokens)
        if isinstance(stop, str):
            at = text.find(stop)
            text = text[: at + len(stop)] if params.include_stop_str_in_output else text[:at]
        logprobs, total = None, None
        if steps is not None:
            logprobs, total = [], 0.0
            for i, tok in enumerate(kept):
                lp = float(torch.log_softmax(steps[i][row].float(), dim=-1)[tok])
                logprobs.append({tok: lp})
                total += lp if math.isfinite(lp) else 0.0
        return Completion(kept, text, reason, stop, logprobs, total)

    def _stop_string_end(self, tokens: list[int], stops: list[str]) -> tuple[int, str] | None:
        """(how many tokens, which stop string) up to the token that completes the first stop string."""
        if not stops:
            return None
        text = self.tokenizer.decode(tokens, skip_special_tokens=False)
        found = [s for s in stops if s in text]
        if not found:
            return None
        lo, hi = 1, len(tokens)  # the shortest prefix whose text holds a stop string: binary search
        while lo < hi:
            mid = (lo + hi) // 2
            if any(s in self.tokenizer.decode(tokens[:mid], skip_special_tokens=False) for s in found):
                hi = mid
            else:
                lo = mid + 1
        prefix = self.tokenizer.decode(tokens[:lo], skip_special_tokens=False)
        first = min((prefix.find(s), s) for s in found if s in prefix)
        return lo, first[1]
