"""The policy's own text, whatever its protocol's tags: a recorded trajectory cut into its segments, a turn cut as its
protocol keeps it, the solution found inside the decoded prompt and response, and a search block's queries."""

from __future__ import annotations

import re


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


def split_solution(query: str, prompt: str) -> str:
    """The solution inside OpenRLHF's decoded `query` (prompt + response) given the `prompt`.

    Decoding the token ids does not always give back the prompt string byte for byte (special tokens
    in front, whitespace clean-up), so after the exact forms the prompt is matched ignoring white space.
    Raises ValueError when the prompt cannot be found, so a mismatch is never scored silently.
    """
    if query.startswith(prompt):
        return query[len(prompt) :]
    at = query.find(prompt)
    if at >= 0:
        return query[at + len(prompt) :]
    end = _match_ignoring_space(query, prompt)
    if end is None:
        raise ValueError("the prompt is not contained in the query")
    return query[end:]


# str.split()'s white space (every str.isspace() code point; the last one is U+3000) mapped to nothing.
_DROP_SPACE = {c: None for c in range(0x3001) if chr(c).isspace()}
_NON_SPACE_RUN = re.compile(r"\S+")
_BLOCK = 1 << 16


def _squeeze(text: str) -> str:
    """`text` without white space. str.translate is fastest on ASCII; otherwise split and join a block
    at a time, which bounds the word objects alive at once."""
    if text.isascii():
        return text.translate(_DROP_SPACE)
    return "".join("".join(text[i : i + _BLOCK].split()) for i in range(0, len(text), _BLOCK))


def _match_ignoring_space(query: str, prompt: str) -> int | None:
    """Where the prompt ends in the query when white space is ignored on both sides, or None.

    Works on whole strings and fixed-size blocks (squeezed copies, one find): a per-character
    position list of a multi-megabyte query cost gigabytes.
    """
    needle = _squeeze(prompt)
    if not needle:
        return 0
    at = _squeeze(query).find(needle)
    if at < 0:
        return None
    return _end_of_non_space(query, at + len(needle))


def _end_of_non_space(text: str, n: int) -> int:
    """The index just past the n-th (n >= 1) non-space character of `text`, which has at least n."""
    start = 0
    while (count := len(_squeeze(text[start : start + _BLOCK]))) < n:
        n -= count
        start += _BLOCK
    for run in _NON_SPACE_RUN.finditer(text, start, start + _BLOCK):
        if n <= run.end() - run.start():
            return run.start() + n
        n -= run.end() - run.start()
    raise AssertionError("unreachable: the block holds the n-th non-space character")


def clean_query(raw: str) -> str:
    """A search query as the environment sends it: quotes stripped, white space collapsed."""
    return " ".join(raw.replace('"', " ").replace("\u201c", " ").replace("\u201d", " ").split())


def split_queries(query: str, separator: str, limit: int) -> list[str]:
    """The queries of one block in multi-query mode: split on the separator, cleaned, empties dropped,
    at most `limit` (the rest are ignored, which keeps one block from fanning out without bound)."""
    if limit <= 1:
        return [query]
    parts = [clean_query(q) for q in query.split(separator)]
    return [q for q in parts if q][:limit] or [query]
