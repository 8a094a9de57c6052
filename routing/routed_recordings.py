"""Recorded search trajectories turned into routing ones, for CPU runs of LLM routing (the rehearsal,
routing evaluations with `--engine replay`): each recorded query gets a pool model's name in front,
`<|begin_of_query|> medium: keywords <|end_of_query|>`, escalating from the cheapest model to the
dearest over the queries of a trajectory (a plausible policy: ask cheap first, then a stronger model).

    python -m routing.routed_recordings --config configs/stages/router_r1.yaml \
        --recordings examples/bamboogle_llama_sample.jsonl --out runs/routed.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from routing.llm_router import RouterConfig, read_pool
from searchrl.config import ConfigError
from searchrl.protocol import BEGIN_QUERY, END_QUERY

_QUERY = re.compile(re.escape(BEGIN_QUERY) + r"(.*?)" + re.escape(END_QUERY), re.S)


def by_price(pool: RouterConfig) -> list[str]:
    """The pool's model names, cheapest first."""
    return [
        m.name for m in sorted(pool.models, key=lambda m: (m.price_per_1k_prompt + m.price_per_1k_completion, m.name))
    ]


def route_trajectory(trajectory: str, names: list[str]) -> str:
    """The trajectory with its i-th query addressed to names[min(i, len(names) - 1)]."""
    count = 0

    def routed(match: re.Match[str]) -> str:
        nonlocal count
        name = names[min(count, len(names) - 1)]
        count += 1
        return f"{BEGIN_QUERY} {name}: {match.group(1).strip()} {END_QUERY}"

    return _QUERY.sub(routed, trajectory)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m routing.routed_recordings",
        description="Rewrite recorded trajectories (question, gen_text_store) so their queries name pool models.",
    )
    p.add_argument("--config", default="configs/stages/router_r1.yaml", help="stage config holding the pool")
    p.add_argument("--recordings", required=True, help="JSONL with question and gen_text_store")
    p.add_argument("--out", type=Path, required=True, help="routed recordings JSONL")
    args = p.parse_args(argv)
    try:
        names = by_price(read_pool(args.config))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in Path(args.recordings).read_text(encoding="utf-8").splitlines() if line]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            row["gen_text_store"] = route_trajectory(row["gen_text_store"], names)
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} trajectories -> {args.out} (queries escalate over {', '.join(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
