"""Generation for evaluation: the text-level episode loop over an engine that is vLLM offline (GPU),
any OpenAI-compatible completions endpoint (e.g. `vllm serve`), or Hugging Face transformers (CPU).

Episodes advance turn by turn together: each turn generates for every active episode in one engine
batch, then their searches go to the backend in one batch, through the same environment step as
training (`searchrl.rollout.environment`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from eval.segments import segment_text
from searchrl.http_transport import RetryPolicy
from searchrl.openai_client import OpenAIClient, key_from_env
from searchrl.protocols import DEFAULT_PROTOCOL, TagProtocol, get_protocol
from searchrl.protocols.segments import cut_turn
from searchrl.rollout.engines import HFEngine
from searchrl.rollout.environment import Episode, SearchEnvironment

DEFAULT = get_protocol(DEFAULT_PROTOCOL)


@dataclass(frozen=True)
class GenParams:
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = 0
    # Where a segment stops (the protocol's search close, and its answer close where it cuts there), and the tag
    # that opens what each closes.
    stops: tuple[str, ...] = (DEFAULT.SEARCH_CLOSE,)
    opens: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT.STOP_OPENS))
    # A turn that stopped on none of `stops` is cut after the first of this (the protocol's CUT_AFTER).
    cut_after: str | None = None

    @classmethod
    def for_protocol(cls, protocol: TagProtocol, stop_after_answer: bool = False, **kwargs: Any) -> GenParams:
        stops = tuple(protocol.stops(stop_after_answer))
        return cls(stops=stops, opens=dict(protocol.STOP_OPENS), cut_after=protocol.CUT_AFTER, **kwargs)

    def segment(self, choice: Mapping[str, Any]) -> Completion:
        text, finish = segment_text(choice, self.stops, self.opens)
        cut = cut_turn(text, self.stops, self.cut_after)
        return Completion(cut, "stop" if cut != text else finish)

    def segment_kwargs(self) -> dict[str, Any]:
        """Sampling arguments for one segment, in vLLM's SamplingParams names: stop on the protocol's stops, keep
        them."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "stop": list(self.stops),
            "include_stop_str_in_output": True,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str  # "stop" (stop string or EOS) or "length"


class TextEngine(Protocol):
    async def generate_batch(self, prompts: list[str], params: GenParams) -> list[Completion]: ...


class OpenAICompletionsEngine:
    """POST {base_url}/completions, one request per prompt; at most `max_connections` in flight, the rest
    waiting their turn outside `timeout_s`. 5xx, 429 and connection trouble are retried (Retry-After honoured)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 600.0,
        max_connections: int = 256,
        retries: int = 3,
    ) -> None:
        self.model = model
        self._llm = OpenAIClient(
            base_url,
            api_key=key_from_env(api_key_env),
            retry=RetryPolicy(retries=retries),
            timeout_s=timeout_s,
            max_in_flight=max_connections,
        )
        self.url = self._llm.url("completions")

    async def _one(self, prompt: str, params: GenParams) -> Completion:
        params_body = {
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stop": list(params.stops),
            "include_stop_str_in_output": True,  # vLLM's extension; others ignore it
        }
        if params.seed is not None:
            params_body["seed"] = params.seed
        choice = await self._llm.complete(self.model, prompt, **params_body)
        return params.segment(choice)

    async def generate_batch(self, prompts: list[str], params: GenParams) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(p, params) for p in prompts)))

    async def aclose(self) -> None:
        await self._llm.aclose()


class HFTextEngine:
    """A transformers model on CPU (tests, small checks, the learning benchmark's evaluation). With
    `batch_size` > 1 the prompts of a turn are sampled together, left-padded, `batch_size` at a time."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 1) -> None:

        self.tokenizer = tokenizer
        self.model = model
        self.batch_size = batch_size
        self.engine = HFEngine(model, tokenizer)

    @classmethod
    def from_pretrained(cls, path: str, batch_size: int = 1) -> HFTextEngine:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(path).eval()
        return cls(model, AutoTokenizer.from_pretrained(path), batch_size)

    def _completion(self, text: str, finish_reason: str, params: GenParams) -> Completion:
        if self.tokenizer.eos_token and text.endswith(self.tokenizer.eos_token):
            text = text[: -len(self.tokenizer.eos_token)]
        # The engine keeps the stop string; with no stop reported, an open query at EOS stays open.
        return params.segment({"text": text, "finish_reason": finish_reason, "stop_reason": None})

    async def generate_batch(self, prompts: list[str], params: GenParams) -> list[Completion]:
        from searchrl.rollout.engines import SamplingParams

        if self.batch_size > 1:
            out: list[Completion] = []
            for i in range(0, len(prompts), self.batch_size):
                out += await asyncio.to_thread(self._sample_together, prompts[i : i + self.batch_size], params)
            return out
        out = []
        for prompt in prompts:
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            result = (await self.engine.generate(ids, SamplingParams(**params.segment_kwargs()))).outputs[0]
            out.append(self._completion(result.text, result.finish_reason, params))
        return out

    def _sample_together(self, prompts: list[str], params: GenParams) -> list[Completion]:
        import torch

        tok = self.tokenizer
        side, tok.padding_side = tok.padding_side, "left"
        try:
            batch = tok(prompts, add_special_tokens=False, return_tensors="pt", padding=True)
        finally:
            tok.padding_side = side
        sample = params.temperature > 0
        if params.seed is not None:
            torch.manual_seed(params.seed)
        with torch.no_grad():
            generated = self.model.generate(
                **batch,
                max_new_tokens=params.max_tokens,
                do_sample=sample,
                temperature=params.temperature if sample else None,
                top_p=params.top_p if sample else None,
                stop_strings=list(params.stops),
                tokenizer=tok,
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
                eos_token_id=tok.eos_token_id,
            )
        out = []
        for row in generated[:, batch["input_ids"].shape[1] :].tolist():
            ended = tok.eos_token_id in row
            row = row[: row.index(tok.eos_token_id) + 1] if ended else row
            text = tok.decode(row, skip_special_tokens=False)
            found = [(text.index(stop), stop) for stop in params.stops if stop in text]
            if found:
                at, stop = min(found)
                text = text[: at + len(stop)]
            length = not (ended or found) and len(row) >= params.max_tokens
            out.append(self._completion(text, "length" if length else "stop", params))
        return out

    async def aclose(self) -> None:
        pass


class VLLMEngine:
    """vLLM offline on the GPU: one `LLM.generate` call per turn for every active episode."""

    def __init__(self, model: str, **engine_args: Any) -> None:
        from vllm import LLM

        self.llm = LLM(model=model, **engine_args)
        self.tokenizer = self.llm.get_tokenizer()

    async def generate_batch(self, prompts: list[str], params: GenParams) -> list[Completion]:
        from vllm import SamplingParams

        sp = SamplingParams(**params.segment_kwargs())
        outputs = await asyncio.to_thread(self.llm.generate, prompts, sp, use_tqdm=False)
        return [params.segment(vars_of(o.outputs[0])) for o in outputs]

    async def aclose(self) -> None:
        pass


def vars_of(output: Any) -> dict[str, Any]:
    """The fields of a vLLM CompletionOutput that `segment_text` reads."""
    return {k: getattr(output, k, None) for k in ("text", "finish_reason", "stop_reason")}


@dataclass
class EpisodeResult:
    episode: Episode
    truncated: bool


async def run_episodes(
    engine: TextEngine, env: SearchEnvironment, prompts: list[str], labels: list[Any], params: GenParams
) -> list[EpisodeResult]:
    """Run every episode to its end: an answer, EOS, the segment cap, or the search cap. The number of
    turns is bounded by the search cap, so no separate total budget is needed."""
    episodes = [Episode(prompt=p, label=label) for p, label in zip(prompts, labels, strict=True)]
    truncated = [False] * len(episodes)
    active = list(range(len(episodes)))
    while active:
        completions = await engine.generate_batch([episodes[i].prompt + episodes[i].solution for i in active], params)
        for i, c in zip(active, completions, strict=True):
            truncated[i] = c.finish_reason == "length"
        outcomes = await env.step_batch([episodes[i] for i in active], [c.text for c in completions])
        active = [i for i, o in zip(active, outcomes, strict=True) if not o.done]
    return [EpisodeResult(ep, t) for ep, t in zip(episodes, truncated, strict=True)]
