"""One generation segment from an OpenAI-compatible `/completions` choice, normalised to the tag protocol.

Endpoints disagree on the stop string: `vllm serve` honours `include_stop_str_in_output` (the text
already ends with `<|end_of_query|>`) and names it in `stop_reason`; SGLang names it in `matched_stop`;
OpenAI-style servers drop it and say only `finish_reason: "stop"`; some ignore `stop` and run on.
Whatever the endpoint did, the segment handed to the environment ends with exactly one
`<|end_of_query|>` when generation stopped on it, and never otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from searchrl.protocols.r1_searcher import BEGIN_QUERY, END_QUERY

# Fields in which endpoints report the stop string that ended generation (vLLM, SGLang).
STOP_FIELDS = ("stop_reason", "matched_stop")


def stopped_on(choice: Mapping[str, Any]) -> tuple[bool, Any]:
    """Whether the endpoint reports which stop ended the segment, and what it reports (None: EOS)."""
    for name in STOP_FIELDS:
        if name in choice:
            return True, choice[name]
    return False, None


def segment_text(choice: Mapping[str, Any]) -> tuple[str, str]:
    """The segment's text, closed with one `<|end_of_query|>` when it stopped on one, and its finish
    reason, `"stop"` or `"length"`."""
    text = str(choice.get("text") or "")
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    at = text.find(END_QUERY)
    if at >= 0:
        # The stop string came back (kept, or the endpoint ignored `stop`): cut after its first
        # occurrence, as a stop would have.
        return text[: at + len(END_QUERY)], "stop"
    if finish == "length":
        return text, finish
    reported, reason = stopped_on(choice)
    if reported:
        # The endpoint says what stopped it; None or another value is EOS or a different stop, and an
        # open query then stays open (the format rules judge it) rather than becoming a search.
        closes = reason == END_QUERY
    else:
        closes = BEGIN_QUERY in text
    return (text + END_QUERY if closes else text), finish
