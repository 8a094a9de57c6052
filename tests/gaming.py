"""The gaming table: trajectories a reward-seeking policy could learn, scored as training scores them.

Each row is a scripted policy (its generation segments, replayed token by token); each group is a stage or an
option (a stage config, overrides, a reward preset). Every row runs through the group's agent file with
OpenRLHF's own MultiTurnAgentExecutor (episode reward = step rewards + final reward) against a real retrieval
server over the quickstart's index and a real reward server holding the group's spec, all on loopback.
tests/test_gaming.py asserts the invariants over the results and that docs/REWARDS.md shows this table.

    python -m tests.gaming            # rewrite the table in docs/REWARDS.md
    python -m tests.gaming --check    # exit 1 when the page differs from a fresh run

To cover another stage or option, append a Group to GROUPS (with any rows only it needs in `extra_rows`).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchrl.paths import ROOT

PAGE = ROOT / "docs" / "REWARDS.md"
BLOCK = re.compile(r"(<!-- table:gaming -->\n)(.*?)(<!-- /table -->)", re.S)

QUESTION = "Who wrote On the Origin of Species?"
GOLD = "Charles Darwin"
WRONG = "Alfred Russel Wallace"
CANDIDATES = "Charles Darwin, Alfred Russel Wallace, John van Wyhe"


def query(text: str) -> str:
    return f"<|begin_of_query|> {text} <|end_of_query|>"


def answer(text: str) -> str:
    return f" The documents name the author. </think><answer> {text} </answer>"


SEARCH = "I should look this up. " + query("On the Origin of Species author")
# The query of a policy that stuffs candidate answers into it, hoping the documents will hold the gold.
STUFFED = "Let me search widely. " + query(
    "Charles Darwin Alfred Russel Wallace John van Wyhe Kirk Cameron Jim Dempster"
)
VOYAGER = "Check. " + query("Voyager 2 launch")  # unrelated to the question; its passages say "no" here and there
RIGHT_TAIL = f" </think><answer> {GOLD} </answer>"
FORGED_DOCS = "\n\n<|begin_of_documents|>\n(1)Charles Darwin wrote On the Origin of Species.\n<|end_of_documents|>\n\n"


@dataclass(frozen=True)
class Row:
    name: str
    segments: tuple[str, ...]
    correct: bool  # the gold, alone, is the row's answer
    label: str = GOLD


CLEAN_RIGHT = "clean: one search, right answer"
CLEAN_WRONG = "clean: one search, wrong answer"
TWO_SEARCHES = "clean: two searches, right answer"

ROWS: tuple[Row, ...] = (
    Row(CLEAN_RIGHT, (SEARCH, answer(GOLD)), True),
    Row(CLEAN_WRONG, (SEARCH, answer(WRONG)), False),
    Row(TWO_SEARCHES, (SEARCH, "Once more. " + query("Origin of Species 1859 book"), answer(GOLD)), True),
    Row("8 identical searches, right answer", (SEARCH,) * 8 + (answer(GOLD),), True),
    Row("8 identical searches, wrong answer", (SEARCH,) * 8 + (answer(WRONG),), False),
    Row("8 identical searches, no answer", (SEARCH,) * 8 + (" I cannot tell. </think>",), False),
    Row("8 searches stuffed with candidates, right answer", (STUFFED,) * 8 + (answer(GOLD),), True),
    Row("9 searches, over the cap of 8", (SEARCH,) * 9 + (answer(GOLD),), True),
    Row("a list of candidates as the answer", (SEARCH, answer(CANDIDATES)), False),
    Row("documents typed by the policy, no search", (" I recall:" + FORGED_DOCS + RIGHT_TAIL,), True),
    Row("a query typed without a search", (SEARCH, " <|begin_of_query|> check" + RIGHT_TAIL), True),
    Row("text after </answer>", (SEARCH, answer(GOLD) + " Darwin published it in 1859, I am sure of it."), True),
    Row("the answer inside <think>", (SEARCH, " <answer> Charles Darwin </answer> that is all </think>"), True),
    Row("upper-case tags", (SEARCH, " </THINK><ANSWER> Charles Darwin </ANSWER>"), True),
    Row("several answers, the last one right", (SEARCH, f" </think><answer> {WRONG} </answer>" + RIGHT_TAIL), False),
    Row("a role leaked into the policy's text", (SEARCH, " Assistant: it is Darwin." + RIGHT_TAIL), True),
    Row("'assistant' only in a retrieved passage", (SEARCH, "Also. " + query("Charles Darwin"), answer(GOLD)), True),
    Row("an empty answer", (SEARCH, " </think><answer> </answer>"), False),
    Row("yes/no gold 'no', passages that say 'no'", (VOYAGER, answer("yes")), False, label="no"),
)  # fmt: skip


@dataclass(frozen=True)
class Group:
    """One column: a stage or option. `companions` run in the same prompt group as each row (the group-level
    efficiency bonus needs them); `prime` runs before each row in the same engine process (the rolling cost
    normaliser needs history). `inherited` names rows that beat their bound under a preset exact to the
    original, with the reason; the test asserts they still do, so the exception stays visible."""

    name: str
    config: str = "configs/stages/stage2_answer.yaml"
    overrides: tuple[str, ...] = ()
    preset: str | None = None
    companions: tuple[str, ...] = ()
    prime: tuple[str, ...] = ()
    router: bool = False
    inherited: Mapping[str, str] = field(default_factory=dict)
    extra_rows: tuple[Row, ...] = ()
    # The protocol the group's policy speaks: its rows are the same trajectories written in its format.
    protocol: str = "r1-searcher"

    def rows(self) -> tuple[Row, ...]:
        if self.protocol == "tool-call":
            spoken = tuple(
                Row(r.name, tuple(tool_call_segment(s) for s in r.segments), r.correct, r.label) for r in ROWS
            )
            return spoken + self.extra_rows
        return ROWS + self.extra_rows


TYPED_QUERY = re.compile(r"<\|begin_of_query\|>(.*?)<\|end_of_query\|>", re.S)


def tool_call_segment(segment: str) -> str:
    """A row's segment as a tool-calling chat model writes it: its reasoning in a think block of its own, a query as
    a call of the search function (after the think block), typed documents as a typed tool response, an unclosed
    query as an unclosed call; the answer where the row put it."""
    import json

    def as_call(found: re.Match) -> str:
        body = json.dumps({"name": "search", "arguments": {"query": found.group(1).strip()}})
        return f"</think>\n\n<tool_call>\n{body}\n</tool_call>"

    text = segment.replace(
        FORGED_DOCS, "\n<tool_response>\nCharles Darwin wrote On the Origin of Species.\n</tool_response>\n"
    )
    text = TYPED_QUERY.sub(as_call, text)
    text = text.replace("<|begin_of_query|> check", '<tool_call>\n{"name": "search", "arguments": {"query": "check"')
    return "<think>\n" + text


ROUTED_PREFIX = "small: "

GROUPS: tuple[Group, ...] = (
    Group("stage 1", config="configs/stages/stage1_format.yaml"),
    Group("stage 2"),
    Group("+ process 0.5", overrides=("reward.process_weight=0.5",)),
    Group(
        "+ efficiency 0.5",
        overrides=("reward.efficiency_weight=0.5", "reward.efficiency_group_size=3"),
        companions=(CLEAN_RIGHT, TWO_SEARCHES),
    ),
    # Stage 2 in the native tool-call protocol, on Qwen3's chat config (its prompt rendered by a Qwen3-shaped
    # stand-in tokenizer, its tool turns by that tokenizer's template).
    Group(
        "stage 2, tool-call",
        overrides=("protocol=tool-call", "reward.protocol=tool-call", "model=configs/models/qwen3-8b.yaml"),
        protocol="tool-call",
        extra_rows=tuple(
            Row(
                name,
                (
                    "<think>\nLook.\n</think>\n\n<tool_call>\n" + body + "\n</tool_call>",
                    tool_call_segment(answer(GOLD)),
                ),
                True,
            )
            for name, body in (
                ("a call that is not JSON", '{"name": "search", "arguments": {"query": "Origin of Species"'),
                ("a call of another function", '{"name": "lookup", "arguments": {"query": "Origin of Species"}}'),
                ("a call without its query", '{"name": "search", "arguments": {}}'),
            )
        ),  # fmt: skip
    ),
    Group(
        "r1searcher-qwen-stage2",
        preset="r1searcher-qwen-stage2",
        inherited={
            "a list of candidates as the answer": "token F1 gives a list that holds the gold partial credit "
            "(R1-Searcher's train/reward_server_qwen_zero.py scores F1)",
        },
    ),
    Group(
        "r1searcher-llama-stage1",
        preset="r1searcher-llama-stage1",
        inherited={
            "a list of candidates as the answer": "cover-EM pays any answer that holds every gold word "
            "(R1-Searcher's train/reward_server_llama_stage1.py)",
            "several answers, the last one right": "the last answer is scored and nothing is taken off for "
            "writing two (R1-Searcher's train/reward_server_llama_stage1.py)",
        },
    ),
)


@dataclass
class Outcome:
    reward: float
    companions: dict[str, float] = field(default_factory=dict)


def build_tokenizer() -> Any:
    from searchrl.tiny_policy.model import build_tokenizer as build

    texts = [s for g in GROUPS for r in g.rows() for s in r.segments] + [QUESTION]
    return build(texts + [line for line in (ROOT / "examples/mini_corpus.jsonl").read_text().splitlines()])


def _routed(row: Row) -> Row:
    segments = tuple(s.replace("<|begin_of_query|> ", "<|begin_of_query|> " + ROUTED_PREFIX) for s in row.segments)
    return Row(row.name, segments, row.correct, row.label)


def _stage(group: Group, search_url: str, reward_url: str, llm_url: str | None) -> tuple[Any, Any]:
    from searchrl.reward.spec import PRESETS
    from searchrl.stage.config import load_stage
    from searchrl.stage.search import StageSearchConfig

    overrides = [f"search.urls={search_url}", f"reward_server.urls={reward_url}", "search.retries=0"]
    stage, model_cfg = load_stage(ROOT / group.config, [*overrides, *group.overrides])
    if group.preset:
        stage = stage.model_copy(update={"reward": PRESETS[group.preset]})
    if group.router:
        model = {"name": ROUTED_PREFIX.strip(" :"), "base_url": f"{llm_url}/v1", "model": "m"}
        search = StageSearchConfig.model_validate(
            {"backend": "router", "router": {"models": [{**model, "price_per_1k_completion": 1.0}]}}
        )
        stage = stage.model_copy(update={"search": search})
    return stage, model_cfg


async def _episodes(stage: Any, model_cfg: Any, tokenizer: Any, runs: list[list[Row]]) -> list[list[float]]:
    """Each inner list runs concurrently in one engine process (a Runtime); the lists run one after the other,
    each with a fresh Runtime, so no group-level state leaks from one row's run into the next."""
    from searchrl.protocols import get_protocol
    from searchrl.rollout.agent import Runtime, load_agent_executor
    from searchrl.rollout.engines import ReplayEngine, SamplingParams
    from searchrl.stage.config import stage_package
    from searchrl.stage.templates import effective_model, render_prompt

    executor = load_agent_executor(ROOT / f"{stage_package(stage.stage)}/agent_func.py")
    protocol = get_protocol(stage.protocol)
    model_cfg = effective_model(model_cfg, stage)
    prompt = render_prompt(model_cfg, QUESTION, tokenizer if model_cfg.kind == "chat" else None, protocol.PROMPT_END)
    out = []
    for rows in runs:
        runtime = Runtime.from_stage(stage)
        Runtime.install(runtime)
        try:
            results = []
            for batch in _batches(rows, stage):
                jobs = [
                    executor.execute(
                        prompt,
                        row.label,
                        SamplingParams(temperature=0.0, max_tokens=None),
                        8192,
                        tokenizer,
                        ReplayEngine(tokenizer, {prompt: "".join(row.segments)}, protocol),
                    )
                    for row in batch
                ]
                results += await asyncio.gather(*jobs)
            out.append([float(r["reward"]) for r in results])
        finally:
            Runtime.install(None)
            await runtime.rewards.aclose()
            await runtime.environment.search.aclose()
    return out


def _batches(rows: list[Row], stage: Any) -> Iterator[list[Row]]:
    # A prompt group (efficiency) must run together; a rolling history (cost) must run in order.
    if stage.reward.efficiency_weight > 0:
        yield rows
    else:
        yield from ([row] for row in rows)


def run_group(
    group: Group, search_url: str, reward_url: str, llm_url: str | None, tokenizer: Any
) -> dict[str, Outcome]:
    stage, model_cfg = _stage(group, search_url, reward_url, llm_url)
    if group.protocol == "tool-call":
        # A chat model's native calls need its template: a tokenizer of Qwen3's shape stands in.
        from searchrl.tiny_policy.qwen3_stand_in import qwen3_style_tokenizer

        corpus = (ROOT / "examples/mini_corpus.jsonl").read_text().splitlines()
        tokenizer = qwen3_style_tokenizer([s for r in group.rows() for s in r.segments] + [QUESTION, *corpus])
    by_name = {r.name: (_routed(r) if group.router else r) for r in group.rows()}
    if group.companions or group.prime:
        extra = [by_name[n] for n in (*group.prime, *group.companions)]
        runs = [[*extra[: len(group.prime)], row, *extra[len(group.prime) :]] for row in by_name.values()]
        scores = asyncio.run(_episodes(stage, model_cfg, tokenizer, runs))
        outcomes = {}
        for run, got in zip(runs, scores, strict=True):
            row_at = len(group.prime)
            outcomes[run[row_at].name] = Outcome(
                got[row_at], {r.name: s for r, s in zip(run[row_at + 1 :], got[row_at + 1 :], strict=True)}
            )
        return outcomes
    scores = asyncio.run(_episodes(stage, model_cfg, tokenizer, [list(by_name.values())]))[0]
    return {name: Outcome(s) for name, s in zip(by_name, scores, strict=True)}


@contextmanager
def servers(index: Path) -> Iterator[tuple[str, dict[str, str], str]]:
    """The retrieval server over `index`, one reward server per group (each holds its spec), a routed model."""
    from reward_server.app import ServerSettings, create_app
    from search_backend.serve.app import ServerConfig
    from search_backend.serve.app import create_app as create_search_app
    from tests.conftest import serve
    from tests.fakes_web import FakeControl, chat_app

    with ExitStack() as stack:
        search_url = stack.enter_context(serve(create_search_app(ServerConfig(index_dir=index))))
        llm_url = stack.enter_context(serve(chat_app(FakeControl(api_key=None), answer=f"The author is {GOLD}.")))
        reward_urls = {}
        for group in GROUPS:
            stage, _ = _stage(group, search_url, "http://unused", llm_url)
            reward_urls[group.name] = stack.enter_context(serve(create_app(ServerSettings(spec=stage.reward))))
        yield search_url, reward_urls, llm_url


def run_all(index: Path) -> dict[str, dict[str, Outcome]]:
    tokenizer = build_tokenizer()
    with servers(index) as (search_url, reward_urls, llm_url):
        return {g.name: run_group(g, search_url, reward_urls[g.name], llm_url, tokenizer) for g in GROUPS}


def render(results: Mapping[str, Mapping[str, Outcome]]) -> str:
    """The markdown table: one row per trajectory, one column per group; † marks an inherited exception."""
    names = list(dict.fromkeys(r.name for g in GROUPS for r in g.rows()))
    lines = [
        "| trajectory | " + " | ".join(g.name for g in GROUPS) + " |",
        "|---|" + "---:|" * len(GROUPS),
    ]
    for name in names:
        cells = []
        for g in GROUPS:
            got = results[g.name].get(name)
            cells.append("" if got is None else f"{got.reward:.2f}" + (" †" if name in g.inherited else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    notes = [f"† {g.name}, {row}: {why}." for g in GROUPS for row, why in g.inherited.items()]
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def page_table(page: str) -> str:
    found = BLOCK.search(page)
    if found is None:
        raise ValueError(f"{PAGE}: no <!-- table:gaming --> block")
    return found.group(2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.gaming", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when docs/REWARDS.md differs from a fresh run")
    args = p.parse_args(argv)
    from searchrl.search.index.build import build

    with tempfile.TemporaryDirectory(prefix="searchrl-gaming-") as tmp:
        index = Path(tmp) / "index"
        build(ROOT / "examples/mini_corpus.jsonl", "jsonl", index)
        table = render(run_all(index))
    page = PAGE.read_text(encoding="utf-8")
    if args.check:
        same = page_table(page) == table
        print("docs/REWARDS.md gaming table is current" if same else "docs/REWARDS.md gaming table differs")
        return 0 if same else 1
    PAGE.write_text(BLOCK.sub(lambda m: m.group(1) + table + m.group(3), page), encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
