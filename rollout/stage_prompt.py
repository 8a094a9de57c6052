"""A stage's own prompt text, over the model config's: for a stage whose action differs from searching
a knowledge source (LLM routing, Router-R1's idea), the prompt lists the pool it routes over; for one that
sends several queries per search (RAG-R1's idea), it states the episode's limit and separator.

The pool listing is filled in from the stage's `search.router` models, so the prompt a policy trains
on always names the models, prices and latencies the backend really serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from rollout.config import ModelConfig, StageConfig
    from search_backend.llm_router import RouterConfig

DEFAULT_MODEL_LINE = (
    "- {name}: {description} Price ${price_prompt} per 1k prompt tokens, ${price_completion} per 1k completion "
    "tokens{latency}."
)


class StagePrompt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str | None = Field(None, description="base models: the whole prompt, with {question} and {models}")
    system: str | None = Field(None, description="chat models: the system message, with {models}")
    model_line: str = Field(DEFAULT_MODEL_LINE, description="one line of the {models} listing per pool model")

    @model_validator(mode="after")
    def _placeholders(self) -> StagePrompt:
        if self.base is None and self.system is None:
            raise ValueError("give `base` (base models) and/or `system` (chat models)")
        if self.base is not None and "{question}" not in self.base:
            raise ValueError("`base` must contain {question}")
        return self


def pool_listing(router: RouterConfig, model_line: str = DEFAULT_MODEL_LINE) -> str:
    """One line per pool model, in config order: name, description, prices and latency."""
    lines = []
    for m in router.models:
        latency = f", about {m.latency_s:g} s per answer" if m.latency_s is not None else ""
        lines.append(
            model_line.format(
                name=m.name,
                model=m.model,
                description=m.description.strip(),
                price_prompt=f"{m.price_per_1k_prompt:g}",
                price_completion=f"{m.price_per_1k_completion:g}",
                latency=latency,
            ).replace("  ", " ")
        )
    return "\n".join(lines)


def effective_model(model: ModelConfig, stage: StageConfig) -> ModelConfig:
    """The model config whose prompt the stage's policy sees: the stage's prompt, when it has one, with the
    pool listing (`{models}`) and the episode's multi-query settings (`{max_queries}`, `{separator}`) filled
    in; the model config unchanged otherwise."""
    prompt = stage.prompt
    if prompt is None:
        return model
    listing = ""
    if "{models}" in (prompt.base or "") + (prompt.system or ""):
        if stage.search.router is None:
            raise ValueError(f"{stage.stage}: prompt: lists the pool of search.router, which is not set")
        listing = pool_listing(stage.search.router, prompt.model_line)

    def filled(text: str) -> str:
        episode = stage.episode
        text = text.replace("{max_queries}", str(episode.max_queries_per_block))
        return text.replace("{separator}", episode.query_separator).replace("{models}", listing)

    if model.kind == "base":
        if prompt.base is None:
            raise ValueError(f"{stage.stage}: prompt.base: needed for the base model {model.name!r}")
        return model.model_copy(update={"template": filled(prompt.base)})
    if prompt.system is None:
        raise ValueError(f"{stage.stage}: prompt.system: needed for the chat model {model.name!r}")
    return model.model_copy(update={"system": filled(prompt.system)})
