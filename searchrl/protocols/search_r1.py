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
from dataclasses import dataclass
from typing import Any, ClassVar

from searchrl.protocols import r1_searcher
from searchrl.protocols.segments import split_solution as split_solution
from searchrl.search.base import Passage

THINK, SEARCH, INFORMATION, ANSWER = "think", "search", "information", "answer"
TAGS = (THINK, SEARCH, INFORMATION, ANSWER)
THINK_OPEN, THINK_CLOSE = f"<{THINK}>", f"</{THINK}>"
SEARCH_OPEN = f"<{SEARCH}>"
ANSWER_OPEN, ANSWER_CLOSE = f"<{ANSWER}>", f"</{ANSWER}>"
# Where generation stops: a search to run. generation.py's `_postprocess_responses` cuts a turn after its first
# `</search>`, else after its first `</answer>`: a turn that writes `</answer>` and then a search keeps both.
STOP = (f"</{SEARCH}>",)
CUT_AFTER: str | None = f"</{ANSWER}>"
# Its training scripts' data.max_obs_length: each observation's tokens are cut there (`_process_next_obs`).
EPISODE_DEFAULTS: dict = {"max_observation_tokens": 500}
# Its evaluation (scripts/nq_hotpotqa/evaluate.sh): top-3, 4 turns that may search and a last one that may not,
# 500 tokens a turn (training uses 2 turns).
EVAL_EPISODE: dict | None = {
    "top_k": 3, "max_turns": 4, "max_searches": 4, "max_segment_tokens": 500, "max_observation_tokens": 500,
}  # fmt: skip
# The reward formulas (searchrl/reward/spec.py) that read this protocol's tags, and the four tags of Router-R1's walk
# (think, search, information, answer) in its spelling: an LLM router's searches (search.backend: router) can be
# written in it; None: they cannot.
REWARD_FORMULAS: tuple[str, ...] = ("searchrl", "search_r1_em", "search_r1_em_format")
ROUTER_TAGS: dict[str, tuple[str, str]] | None = None
# The tiny policy's warm start that speaks it (a folder of examples/, searchrl/rehearsal/warm_start.py); None: its
# rehearsals start from R1-Searcher's.
WARM_START: str | None = "tiny_policy_search_r1"

NAME = "search-r1"
# Its instruction, as `make_prefix` in scripts/data_process/nq_search.py writes it for every model. Its trainer
# sends it as a user turn through the tokenizer's chat template whenever the tokenizer has one (verl's
# RLHFDataset), Qwen2.5's base models included; as plain text otherwise.
PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Question: {question}\n"
)
# The prompt ends with the question; the policy opens its own `<think>`.
PROMPT_END: str | None = None
# No native tool call: the search is written in the protocol's own tags.
TOOLS: list[dict] | None = None
# One query a search block: the whole block is the query.
MULTI_QUERY = False
# generation.py's answer to a turn that neither searches nor answers: the episode goes on, the turn counted.
INVALID_ACTION: str | None = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
)
SEARCH_CLOSE = f"</{SEARCH}>"
STOP_OPENS = {f"</{SEARCH}>": f"<{SEARCH}>", f"</{ANSWER}>": f"<{ANSWER}>"}
DOCUMENTS_OPEN = f"<{INFORMATION}>"
DOCUMENTS_CLOSE = f"</{INFORMATION}>"
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


# A passage whose title travels in its text, as R1-Searcher's corpora write it (kiltmini's: `Title: t Text: x`).
_TITLED_TEXT = re.compile(r"Title:\s*(.*?)\s+Text:\s*(.*)", re.DOTALL)


# wiki-18 writes a passage as `"Title"`, a newline, then the text; the index keeps the title without them.
QUOTE = '"'


def titled(passage: Passage) -> tuple[str, str]:
    """A passage's title and text, the title taken from a `Title: t Text: x` text where the passage has none."""
    title, text = passage.title, passage.text
    if not title and (found := _TITLED_TEXT.fullmatch(text.strip())):
        title, text = found.group(1), found.group(2)
    return title, text


def passage_entry(passage: Passage, bare_title: bool = False) -> str:
    """One passage as `_passages2string` writes it after `Doc i`: its title in brackets, in the quotes wiki-18's first
    line puts around it (Search-R1 renders that line as it is), then its text. `bare_title` (the stage's
    `episode.bare_titles`) leaves the quotes out, as this project rendered Search-R1's documents before."""
    title, text = titled(passage)
    return f"(Title: {title if bare_title else QUOTE + title + QUOTE}) {text}"


def documents_block(entries: Sequence[str], after: str = "") -> str:
    """The block the environment appends after a search: `Doc i` and an entry a line, inside `<information>`,
    with the blank lines generation.py puts around it. `after` is the action it follows: newlines the action's
    last token already carries (a token that merged `>` with them) are not repeated, so the text stays as
    Search-R1 writes it, whose turns are cut at the tag and tokenized again."""
    lines = "".join(f"Doc {i}{entry}\n" for i, entry in enumerate(entries, start=1))
    return _after(f"\n\n{DOCUMENTS_OPEN}{lines.strip()}{DOCUMENTS_CLOSE}\n\n", after)


def queries_block(queries: Sequence[str], documents: Sequence[Sequence[str]], empty: str, after: str = "") -> str:
    """Not reached: a stage in this protocol sends one query a search (max_queries_per_block 1)."""
    raise ValueError("Search-R1's protocol sends one query a search")


def message_block(message: str, after: str = "") -> str:
    """A block that holds a message instead of passages (a failed search, nothing found)."""
    return _after(f"\n\n{DOCUMENTS_OPEN}{message.strip()}{DOCUMENTS_CLOSE}\n\n", after)


def _after(block: str, after: str) -> str:
    generated = len(after) - len(after.rstrip("\n"))
    return block[min(generated, 2) :]


def render_documents(passages: Sequence[Passage]) -> str:
    return documents_block([passage_entry(p) for p in passages])


def stops(stop_after_answer: bool) -> list[str]:
    """A segment stops at `</search>` (and a turn without one is cut after its first `</answer>`: CUT_AFTER), as
    generation.py cuts its turns; `stop_after_answer` stops at `</answer>` too, which saves the tokens a turn
    writes after its answer but keeps none of a search written after it."""
    return [*STOP, ANSWER_CLOSE] if stop_after_answer else list(STOP)


def search_query(segment: str) -> str | None:
    """The query when the segment's first tagged action is a search, an empty one included (Search-R1 searches
    it as ""); None otherwise."""
    kind, content = action(segment)
    return content if kind == SEARCH else None


def answered(segment: str) -> bool:
    return action(segment)[0] == ANSWER


def policy_answer(solution: str) -> str | None:
    """The last answer the policy wrote itself, None when it wrote none (the environment's invalid-action message
    and documents blocks are not the policy's)."""
    own = _INFORMATION.sub("", solution.replace(INVALID_ACTION or "", ""))
    found = _ANSWER.findall(own)
    return found[-1].strip() if found else None


def scored_answer(prompt: str, solution: str) -> str | None:
    """The answer its EM reads (`qa_em.extract_solution` over the decoded prompt and response): with no answer of
    the policy's own, the instruction's example (`Beijing`) is scored."""
    return final_answer(prompt + solution)


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
    return walk_problem(sequence[marker.end() :])


def walk_problem(content: str) -> str | None:
    """The v0.3 format's walk over a response: None when its blocks come in order (`<think>`, then `<search>` and
    the `<information>` it brought, or `<answer>` to end) with only white space between them, else what broke."""
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


# What the project's own reward (formula searchrl) reads of a response in this protocol: the same facts as
# R1-Searcher's ParsedSolution, so the same format rules apply. The policy's own text leaves out what the
# environment appended: the information blocks and the invalid-action message (itself full of tags).
_ANSWER_FORBIDDEN = (THINK_OPEN, THINK_CLOSE, SEARCH_OPEN, SEARCH_CLOSE, DOCUMENTS_OPEN, DOCUMENTS_CLOSE)


@dataclass(frozen=True)
class ParsedSolution:
    text: str
    own: str  # the policy's own text
    structure_ok: bool  # the v0.3 walk holds over the whole response
    num_searches: int  # complete <search> blocks the policy wrote
    num_document_blocks: int
    answer_opens: int
    answer_closes: int
    answer: str | None
    ANSWER_FORBIDDEN = _ANSWER_FORBIDDEN
    call_problems: ClassVar[tuple[str, ...]] = ()  # no native tool calls in this protocol

    @property
    def outside_documents(self) -> str:
        return self.own

    @property
    def searched(self) -> bool:
        return self.num_searches >= 1

    @property
    def blocks_balanced(self) -> bool:
        """Every search the policy opened it closed, and each brought one information block."""
        return self.own.count(SEARCH_OPEN) == self.num_searches == self.num_document_blocks


def episode_problem(episode: Any) -> str | None:
    """Its episodes take every setting the stage checks for all protocols."""
    return None


def parse_solution(text: str) -> ParsedSolution:
    own = _INFORMATION.sub("", text.replace(INVALID_ACTION or "", ""))
    answers = _ANSWER.findall(own)
    return ParsedSolution(
        text=text,
        own=own,
        structure_ok=walk_problem(text) is None,
        num_searches=own.count(SEARCH_CLOSE),
        num_document_blocks=len(_INFORMATION.findall(text)),
        answer_opens=own.count(ANSWER_OPEN),
        answer_closes=own.count(ANSWER_CLOSE),
        answer=answers[-1].strip() if answers else None,
    )


def from_r1_searcher(trajectory: str) -> str:
    """An R1-Searcher trajectory (the text after its prompt's `<think>`) as a Search-R1 policy would write it: each
    segment's reasoning in `<think>`, its query in `<search>`, the final answer in `<answer>`, the documents left
    out (the environment appends its own). The rehearsal replays released R1-Searcher trajectories this way."""
    out = []
    for reasoning, query, answer in r1_searcher.recorded_turns(trajectory):
        thought = f"<{THINK}>{reasoning}</{THINK}>"
        if query:
            out.append(f"{thought}\n<{SEARCH}> {query} </{SEARCH}>")
        elif answer is not None:
            out.append(f"{thought}\n<{ANSWER}> {answer} </{ANSWER}>")
        else:
            out.append(thought)
    return "\n".join(out)
