"""The tag protocols a run can speak, one module each: its tags, its instruction prompt, where generation stops,
how a segment is read, how the environment renders documents, and what its rewards read.

A stage names its protocol (`protocol: r1-searcher | search-r1 | rag-r1 | router-r1 | tool-call`); the agent, the
environment, the replay engine, the evaluation and the prompt data take it from there, and nothing outside these
modules spells a tag.
R1-Searcher's is the default. A module is its own implementation (mypy checks a module against a Protocol class),
so a new protocol is one module and one entry in `PROTOCOLS` (the names a config accepts are its keys).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from searchrl.protocols import r1_searcher, rag_r1, router_r1, search_r1, tool_call
from searchrl.search.base import Passage


class TagProtocol(Protocol):
    NAME: str
    # The instruction with {question}, for a stage without a prompt of its own; None: the model config's template.
    PROMPT: str | None
    # What a rendered prompt must end with (R1-Searcher's prompts open the policy's `<think>`); None: not checked.
    PROMPT_END: str | None
    # The functions the chat template lists (`tools`), for a protocol that searches by a native tool call.
    TOOLS: list[dict[str, Any]] | None
    # The environment's answer to a segment that neither searches nor answers; None: such a segment ends the episode.
    INVALID_ACTION: str | None
    # What closes a search action and what encloses a documents block: a recorded trajectory is split on them.
    SEARCH_CLOSE: str
    # Each stop string and the tag that opens what it closes: a segment whose endpoint dropped the stop is closed.
    STOP_OPENS: dict[str, str]
    DOCUMENTS_OPEN: str
    DOCUMENTS_CLOSE: str
    # Whether a search block may hold several queries (split on the stage's episode.query_separator).
    MULTI_QUERY: bool
    # A turn that stopped on none of `stops` is cut after the first of this (Search-R1's `</answer>`); None: uncut.
    CUT_AFTER: str | None
    # Episode settings the protocol's original runs with, for a stage that does not set them.
    EPISODE_DEFAULTS: dict[str, Any]
    # The episode its authors evaluated with (`searchrl eval local --protocol`); None: evaluated another way.
    EVAL_EPISODE: dict[str, Any] | None
    # The reward formulas (searchrl/reward/spec.py) that read its tags.
    REWARD_FORMULAS: tuple[str, ...]
    # Router-R1's four tags (think, search, information, answer) in its spelling, (open, close) each: an LLM router's
    # searches (search.backend: router) can be written in it; None: they cannot.
    ROUTER_TAGS: dict[str, tuple[str, str]] | None
    # The tiny policy's warm start that speaks it, a folder of examples/; None: rehearsals start from R1-Searcher's.
    WARM_START: str | None
    # The solution's searches, documents and answer as the project's formula reads them; None: that formula does
    # not read this protocol.
    parse_solution: Callable[[str], Any] | None

    def stops(self, stop_after_answer: bool) -> list[str]: ...
    # The policy's solution inside the decoded prompt and response (raises ValueError when the prompt is not there).
    def split_solution(self, query: str, prompt: str) -> str: ...
    # Why an episode's settings do not fit the protocol, beyond the checks every protocol gets; None when they do.
    def episode_problem(self, episode: Any) -> str | None: ...
    def search_query(self, segment: str) -> str | None: ...
    def answered(self, segment: str) -> bool: ...
    # The answer the policy wrote (None: none), and the one its evaluation metric reads from prompt and solution.
    def policy_answer(self, solution: str) -> str | None: ...
    def scored_answer(self, prompt: str, solution: str) -> str | None: ...
    # One passage as the protocol renders it; `bare_title` (episode.bare_titles) drops the quotes a protocol whose
    # corpus layout quotes titles (Search-R1's wiki-18) puts around them; the others write bare titles either way.
    def passage_entry(self, passage: Passage, bare_title: bool = False) -> str: ...
    def documents_block(self, entries: Sequence[str], after: str = "") -> str: ...
    def message_block(self, message: str, after: str = "") -> str: ...
    # The block after a search of several queries: each query with its own documents' entries (`empty`: none found).
    def queries_block(
        self, queries: Sequence[str], documents: Sequence[Sequence[str]], empty: str, after: str = ""
    ) -> str: ...
    # A recorded R1-Searcher trajectory as a policy of this protocol writes it (the rehearsal replays them).
    def from_r1_searcher(self, trajectory: str) -> str: ...


PROTOCOLS: dict[str, TagProtocol] = {
    "r1-searcher": r1_searcher,
    "search-r1": search_r1,
    "rag-r1": rag_r1,
    "router-r1": router_r1,
    # The one protocol whose environment answer is the chat template's own turn: `bind_template` gives it the
    # policy's; this instance holds the ChatML turn Qwen's templates render.
    "tool-call": tool_call.DEFAULT,
}
PROTOCOL_NAMES: tuple[str, ...] = tuple(PROTOCOLS)
ProtocolName = Literal[PROTOCOL_NAMES]  # type: ignore[valid-type]
DEFAULT_PROTOCOL: ProtocolName = "r1-searcher"


def get_protocol(name: str) -> TagProtocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"protocol {name!r}: not one of {', '.join(PROTOCOLS)}") from None


def bind_template(protocol: TagProtocol, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> TagProtocol:
    """The protocol as the policy's chat template renders the environment's turns (the tool-call protocol's tool
    turn); every other protocol writes its own text and is returned as it is."""
    if isinstance(protocol, tool_call.ToolCallProtocol):
        return protocol.with_template(tokenizer, template_kwargs)
    return protocol
