"""Recorded search trajectories turned into routing ones, for CPU runs of LLM routing (the rehearsal,
routing evaluations with `--engine replay`): each recorded query gets a pool model's name in front,
`<|begin_of_query|> medium: keywords <|end_of_query|>`, escalating from the cheapest model to the
dearest over the queries of a trajectory (a plausible policy: ask cheap first, then a stronger model).
For a pool named the Router-R1 way the trajectory also takes Router-R1's shape: the think block closes
before each query and a new one opens after each answer block, and nothing follows `</answer>`. In another
protocol (Router-R1's own tags) the trajectory is first written in that protocol's tags, then routed.

    python -m searchrl.routing.routed_recordings --config configs/stages/router_r1.yaml \
        --recordings examples/bamboogle_llama_sample.jsonl --out runs/routed.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from searchrl.config import ConfigError, read_yaml
from searchrl.protocols import DEFAULT_PROTOCOL, TagProtocol, get_protocol, r1_searcher
from searchrl.protocols.r1_searcher import (
    ANSWER_CLOSE,
    BEGIN_DOCS,
    BEGIN_QUERY,
    END_DOCS,
    END_QUERY,
    THINK_CLOSE,
    THINK_OPEN,
)
from searchrl.routing.llm_router import RouterConfig, read_pool

_QUERY = re.compile(re.escape(BEGIN_QUERY) + r"(.*?)" + re.escape(END_QUERY), re.S)
_DOCS = re.compile(re.escape(BEGIN_DOCS) + r".*?" + re.escape(END_DOCS) + r"\n*", re.S)


def by_price(pool: RouterConfig) -> list[str]:
    """The pool's model names, cheapest first."""
    return [
        m.name for m in sorted(pool.models, key=lambda m: (m.price_per_1k_prompt + m.price_per_1k_completion, m.name))
    ]


def route_trajectory(
    trajectory: str, names: list[str], router_r1: bool = False, protocol: TagProtocol = r1_searcher
) -> str:
    """The trajectory with its i-th query addressed to names[min(i, len(names) - 1)]; `router_r1`: in
    Router-R1's shape; `protocol`: in its tags (the recording is R1-Searcher's)."""
    count = 0
    if protocol is not r1_searcher:
        opens, closes = protocol.STOP_OPENS[protocol.SEARCH_CLOSE], protocol.SEARCH_CLOSE
        searched = re.compile(re.escape(opens) + r"(.*?)" + re.escape(closes), re.S)

        def named(match: re.Match[str]) -> str:
            nonlocal count
            name = names[min(count, len(names) - 1)]
            count += 1
            return f"{opens} {name}:{match.group(1).strip()} {closes}"

        return searched.sub(named, protocol.from_r1_searcher(trajectory))

    def routed(match: re.Match[str]) -> str:
        nonlocal count
        name = names[min(count, len(names) - 1)]
        count += 1
        if router_r1:
            return f"{THINK_CLOSE}\n{BEGIN_QUERY} {name}:{match.group(1).strip()} {END_QUERY}"
        return f"{BEGIN_QUERY} {name}: {match.group(1).strip()} {END_QUERY}"

    routed_text = _QUERY.sub(routed, trajectory)
    if not router_r1:
        return routed_text
    routed_text = _DOCS.sub(lambda m: m.group(0) + THINK_OPEN, routed_text)
    end = routed_text.find(ANSWER_CLOSE)
    return routed_text if end < 0 else routed_text[: end + len(ANSWER_CLOSE)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m searchrl.routing.routed_recordings",
        description="Rewrite recorded trajectories (question, gen_text_store) so their queries name pool models.",
    )
    p.add_argument("--config", default="configs/stages/router_r1.yaml", help="stage config holding the pool")
    p.add_argument("--recordings", required=True, help="JSONL with question and gen_text_store")
    p.add_argument("--out", type=Path, required=True, help="routed recordings JSONL")
    args = p.parse_args(argv)
    try:
        pool = read_pool(args.config)
        names = by_price(pool)
        protocol = get_protocol(read_yaml(args.config).get("protocol") or DEFAULT_PROTOCOL)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in Path(args.recordings).read_text(encoding="utf-8").splitlines() if line]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            row["gen_text_store"] = route_trajectory(
                row["gen_text_store"], names, pool.naming == "router_r1", protocol
            )
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} trajectories -> {args.out} (queries escalate over {', '.join(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
