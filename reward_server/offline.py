"""`python -m reward_server.offline FILE.jsonl --preset NAME`: score logged rollouts offline.

The same scoring the server runs, over a file: handy to compare a reward spec with R1-Searcher's
on released trajectories before spending GPU time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from searchrl.config import ConfigError
from searchrl.jsonl import RecordError, field, read_jsonl
from searchrl.metrics import as_golds
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import PRESETS, RewardSpec, load_reward_spec


def score_records(
    path: str, spec: RewardSpec, solution_key: str, answer_key: str, out: Path | None = None
) -> dict[str, Any]:
    n = violating = 0
    reward_sum = score_sum = 0.0
    by_rule: Counter[str] = Counter()
    sink = out.open("w", encoding="utf-8") if out else None
    try:
        for lineno, record in enumerate(read_jsonl(path), start=1):
            where = f"{path}:{lineno}"
            metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else None
            result = score_solution(
                str(field(record, solution_key, where)), as_golds(field(record, answer_key, where)), spec, metadata
            )
            n += 1
            reward_sum += result.reward
            score_sum += result.score
            violating += result.logs["format_ok"] == 0.0
            by_rule.update(
                k.removeprefix("violation_") for k, v in result.logs.items() if k.startswith("violation_") and v
            )
            if sink:
                sink.write(
                    json.dumps({"line": lineno, "reward": result.reward, "score": result.score, **result.logs}) + "\n"
                )
    finally:
        if sink:
            sink.close()
    if n == 0:
        raise RecordError(f"{path}: no records")
    return {
        "n": n,
        "mean_reward": reward_sum / n,
        "mean_score": score_sum / n,
        "format_violations": violating,
        "violations_by_rule": dict(sorted(by_rule.items())),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="searchrl reward score", description="Score logged rollouts offline.")
    p.add_argument("file", help="JSONL with a solution text and gold answer per line")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="a stage config whose `reward:` section is the spec")
    src.add_argument("--preset", choices=sorted(PRESETS))
    p.add_argument("--solution-key", default="gen_text_store", help="key of the text after the prompt's <think>")
    p.add_argument("--answer-key", default="answer", help="key of the gold answer(s)")
    p.add_argument("--out", type=Path, default=None, help="also write one JSON line per sample here")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="spec overrides, e.g. answer_metric=em")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    try:
        spec = load_reward_spec(args.config, args.preset, args.overrides)
        summary = score_records(args.file, spec, args.solution_key, args.answer_key, args.out)
    except (ConfigError, RecordError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>20}: {value:.6f}" if isinstance(value, float) else f"{key:>20}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
