"""A stage's own prompt text, over the model config's: for a stage whose action differs from searching
a knowledge source (LLM routing, Router-R1's idea), the prompt lists the pool it routes over; for one that
sends several queries per search (RAG-R1's idea), it states the episode's limit and separator.

The pool listing is filled in from the stage's `search.router` models, so the prompt a policy trains
on always names the models, prices and latencies the backend really serves.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from searchrl.routing.llm_router import RouterConfig

DEFAULT_MODEL_LINE = (
    "- {name}: {description} Price ${price_prompt} per 1k prompt tokens, ${price_completion} per 1k completion "
    "tokens{latency}."
)


class StagePrompt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str | None = Field(None, description="base models: the whole prompt, with {question} and {models}")
    system: str | None = Field(None, description="chat models: the system message, with {models}")
    user: str | None = Field(
        None, description="chat models: the whole user turn, with {models} and {question}; no system message then"
    )
    model_line: str = Field(DEFAULT_MODEL_LINE, description="one line of the {models} listing per pool model")

    @model_validator(mode="after")
    def _placeholders(self) -> StagePrompt:
        if self.base is None and self.system is None and self.user is None:
            raise ValueError("give `base` (base models) and/or `system` or `user` (chat models)")
        for key in ("base", "user"):
            if getattr(self, key) is not None and "{question}" not in getattr(self, key):
                raise ValueError(f"`{key}` must contain {{question}}")
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
