"""How the model name a policy writes before the colon of a routed query picks a pool model.

`exact`: the name as configured (`small: question`). `router_r1`: Router-R1's rule
(`router_r1/llm_agent/route_service.py`, `check_llm_name`): the written name is lower-cased and matched by
the words it contains, so `LLaMA-3.1-70B-Instruct`, `llama-3.1-70b` and `Llama 70B` pick the same model.
Each pool model lists its words (`match`); the first word names its family, and families are tried in pool
order, so a name claimed by a family that has no member with all its words is unknown (as the original's
`llama` without a size is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

Naming = Literal["exact", "router_r1"]
# What Router-R1's format rule treats as the prompt's placeholder rather than a name and a question.
PLACEHOLDERS = ("llm-name", "your-query")


class Named(Protocol):
    name: str
    match: list[str]


def split_query(query: str, naming: Naming) -> tuple[str, str] | None:
    """(written name, question) of a routed query, or None when it has no colon. Router-R1 sends the text
    between the first colon and the next one (its format rule refuses a second colon anyway)."""
    if ":" not in query:
        return None
    if naming == "router_r1":
        parts = query.split(":")
        return parts[0].strip(), parts[1].strip()
    name, _, question = query.partition(":")
    return name.strip(), question.strip()


def is_placeholder(query: str) -> bool:
    return any(p in query.lower() for p in PLACEHOLDERS)


def pick(written: str, models: Sequence[Named], naming: Naming) -> Named | None:
    """The pool model a written name picks, or None when it picks none."""
    if naming == "exact":
        return next((m for m in models if m.name == written.strip()), None)
    name = written.strip().lower()
    family = next((m.match[0] for m in models if m.match and m.match[0] in name), None)
    if family is None:
        return None
    return next((m for m in models if m.match and m.match[0] == family and all(w in name for w in m.match)), None)
