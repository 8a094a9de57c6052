"""One generation segment from an OpenAI-compatible `/completions` choice, normalised to the run's tag protocol.

Endpoints disagree on the stop string: `vllm serve` honours `include_stop_str_in_output` (the text
already ends with the stop, `<|end_of_query|>` in R1-Searcher's protocol) and names it in `stop_reason`; SGLang
names it in `matched_stop`; OpenAI-style servers drop it and say only `finish_reason: "stop"`; some ignore `stop`
and run on. Whatever the endpoint did, the segment handed to the environment ends with exactly one stop string
when generation stopped on it, and never otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from searchrl.protocols import DEFAULT_PROTOCOL, get_protocol

DEFAULT = get_protocol(DEFAULT_PROTOCOL)

# Fields in which endpoints report the stop string that ended generation (vLLM, SGLang).
STOP_FIELDS = ("stop_reason", "matched_stop")


def stopped_on(choice: Mapping[str, Any]) -> tuple[bool, Any]:
    """Whether the endpoint reports which stop ended the segment, and what it reports (None: EOS)."""
    for name in STOP_FIELDS:
        if name in choice:
            return True, choice[name]
    return False, None


def segment_text(
    choice: Mapping[str, Any],
    stops: Sequence[str] = (DEFAULT.SEARCH_CLOSE,),
    opens: Mapping[str, str] = DEFAULT.STOP_OPENS,
) -> tuple[str, str]:
    """The segment's text, closed with one of `stops` when it stopped on one, and its finish reason, `"stop"` or
    `"length"`. `opens`: each stop and the tag that opens what it closes (the protocol's STOP_OPENS)."""
    text = str(choice.get("text") or "")
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    found = [(at, stop) for stop in stops if (at := text.find(stop)) >= 0]
    if found:
        # A stop string came back (kept, or the endpoint ignored `stop`): cut after the first one, as a stop would.
        at, stop = min(found)
        return text[: at + len(stop)], "stop"
    if finish == "length":
        return text, finish
    reported, reason = stopped_on(choice)
    if reported:
        # The endpoint says what stopped it; None or another value is EOS or a different stop, and an
        # open action then stays open (the format rules judge it) rather than becoming a search.
        close = reason if reason in stops else None
    else:
        # Nothing says which: the stop whose opening tag stands last in the text and is left open.
        opened = [(text.rfind(opens[stop]), stop) for stop in stops if stop in opens and opens[stop] in text]
        close = max(opened)[1] if opened else None
    return text + (close or ""), finish
