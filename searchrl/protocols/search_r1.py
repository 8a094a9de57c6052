"""Search-R1's tag protocol, as its code writes and reads it (PeterGriffinJin/Search-R1).

The policy reasons in `<think>`, searches with `<search> query </search>`, the environment appends the results as
`\n\n<information>Doc 1(Title: t) text\nDoc 2(...) ...</information>\n\n` (`search_r1/llm_agent/generation.py`),
and the answer goes in `<answer>`. What its rewards read (`verl/utils/reward_score/qa_em.py`, `qa_em_format.py`),
reimplemented here with the same results, quirks included (docs/REWARDS.md names each):

- the reward reads the whole decoded sequence, prompt included, and takes the last `<answer>` only when the text
  holds at least two: the instruction's own `<answer> and </answer>` and `<answer> Beijing </answer>` count;
- its v0.3 format check starts after the chat template's assistant marker, `<|im_start|>assistant`, and walks the
  tags as a state machine in which only white space may stand between blocks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from searchrl.search.base import Passage

THINK, SEARCH, INFORMATION, ANSWER = "think", "search", "information", "answer"
TAGS = (THINK, SEARCH, INFORMATION, ANSWER)
# Where generation stops: a search to run, or the answer (generation.py cuts a response after either).
STOP = (f"</{SEARCH}>", f"</{ANSWER}>")
ASSISTANT_MARKER = re.compile(r"<\|im_start\|>assistant\s*")

_ANSWER = re.compile(f"<{ANSWER}>(.*?)</{ANSWER}>", re.DOTALL)
_INFORMATION = re.compile(f"<{INFORMATION}>(.*?)</{INFORMATION}>", re.DOTALL)
_ACTION = re.compile(f"<({SEARCH}|{ANSWER})>(.*?)</\\1>", re.DOTALL)
_TAG = re.compile(f"(</?(?:{'|'.join(TAGS)})>)")

# The v0.3 format's walk: (state, tag) -> next state. Text other than white space is allowed only inside a block.
_NEXT = {
    ("start", f"<{THINK}>"): "in_think",
    ("information", f"<{THINK}>"): "in_think",
    ("in_think", f"</{THINK}>"): "after_think",
    ("after_think", f"<{SEARCH}>"): "in_search",
    ("in_search", f"</{SEARCH}>"): "after_search",
    ("after_search", f"<{INFORMATION}>"): "in_information",
    ("in_information", f"</{INFORMATION}>"): "information",
    ("after_think", f"<{ANSWER}>"): "in_answer",
    ("in_answer", f"</{ANSWER}>"): "end",
}
_INSIDE = {"in_think", "in_search", "in_information", "in_answer"}


def render_documents(passages: Sequence[Passage]) -> str:
    """The block the environment appends after a search: one `Doc i(Title: t) text` line a passage."""
    lines = "".join(f"Doc {i}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages, start=1))
    return f"\n\n<{INFORMATION}>{lines.strip()}</{INFORMATION}>\n\n"


def action(segment: str) -> tuple[str | None, str]:
    """What a generated segment asks for: ("search", query), ("answer", text) or (None, "") when neither is there;
    the first tagged block decides, as generation.py's `postprocess_predictions` reads it."""
    match = _ACTION.search(segment)
    return (match.group(1), match.group(2).strip()) if match else (None, "")


def final_answer(sequence: str) -> str | None:
    """The answer the reward reads: the last `<answer>` block of the whole sequence, or None when the sequence holds
    fewer than two (one of them is usually the instruction's example)."""
    found = _ANSWER.findall(sequence)
    return found[-1].strip() if len(found) >= 2 else None


def information_blocks(sequence: str) -> list[str]:
    return [block.strip() for block in _INFORMATION.findall(sequence)]


def format_problem(sequence: str) -> str | None:
    """None when the v0.3 format holds after the assistant marker, else what broke it (the reason its
    `is_valid_sequence` gives)."""
    marker = ASSISTANT_MARKER.search(sequence)
    if marker is None:
        return "Missing assistant marker"
    content = sequence[marker.end() :]
    for tag in TAGS:
        opened, closed = content.count(f"<{tag}>"), content.count(f"</{tag}>")
        if opened != closed:
            return f"Mismatch in {tag} tags: {opened} opening vs {closed} closing tags"
    state = "start"
    for part in _TAG.split(content):
        if not part.strip():
            continue
        if _TAG.fullmatch(part):
            if (state, part) not in _NEXT:
                return f"Unexpected tag {part} in state {state}"
            state = _NEXT[(state, part)]
        elif state == "end":
            return "Unexpected content in state end"
        elif state not in _INSIDE:
            return f"Unexpected content '{part.strip()}' between tags (state: {state})"
    return None if state == "end" else f"Incomplete sequence, ended in state {state}"
