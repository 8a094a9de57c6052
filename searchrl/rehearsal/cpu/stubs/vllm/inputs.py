"""`TokensPrompt`: a prompt given as token ids."""

from __future__ import annotations

from typing import Any, TypedDict


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: list[int]
    multi_modal_data: Any
