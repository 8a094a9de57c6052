"""A recorded trajectory cut into the policy's own segments, whatever its protocol's tags."""

from __future__ import annotations


def policy_segments(trajectory: str, search_close: str, documents_open: str, documents_close: str) -> list[str]:
    """The text up to each search action's close (`search_close` kept), the documents block the environment
    appended right after it left out, and the final segment."""
    segments: list[str] = []
    rest = trajectory
    while search_close in rest:
        head, rest = rest.split(search_close, 1)
        segments.append(head + search_close)
        start = rest.find(documents_open)
        end = rest.find(documents_close, start)
        if start >= 0 and end >= 0 and not rest[:start].strip():
            rest = rest[end + len(documents_close) :].lstrip("\n")
    segments.append(rest)
    return segments


def cut_turn(text: str, stops: list[str] | tuple[str, ...], cut_after: str | None) -> str:
    """A generated turn as its protocol keeps it: a turn that holds one of `stops` is left as generation stopped it;
    one that holds none is cut after the first `cut_after` (Search-R1 cuts a turn without `</search>` after its first
    `</answer>`, whatever follows)."""
    if cut_after is None or any(stop in text for stop in stops):
        return text
    at = text.find(cut_after)
    return text if at < 0 else text[: at + len(cut_after)]
