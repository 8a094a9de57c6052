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
