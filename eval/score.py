"""`python -m eval.score FILE.jsonl`: EM, cover-EM, F1 and (with a judge key) ACC_L of a result file.

Without --pred-key the answer is read from the trajectory with the protocol parser, exactly as
the rewards read it: R1-Searcher's, or the protocol a record names (Search-R1's reads its prompt too).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from searchrl.jsonl import RecordError, field, read_jsonl
from searchrl.metrics import all_metrics, as_golds
from searchrl.protocols import DEFAULT_PROTOCOL, PROTOCOLS


def read_answer(record: dict[str, Any], trajectory_key: str, where: str) -> tuple[str | None, bool]:
    """The answer the record's protocol scores, and whether the policy wrote one. A record names its protocol when it
    is not R1-Searcher's, with the prompt that protocol's metric may read (eval.runner writes both)."""
    name = record.get("protocol", DEFAULT_PROTOCOL)
    if name not in PROTOCOLS:
        raise RecordError(f"{where}: protocol {name!r}: not one of {', '.join(PROTOCOLS)}")
    protocol, solution = PROTOCOLS[name], str(field(record, trajectory_key, where))
    wrote = protocol.policy_answer(solution) is not None
    return protocol.scored_answer(str(record.get("prompt", "")), solution), wrote


def score_file(
    path: str,
    pred_key: str | None = None,
    answer_key: str = "answer",
    judge_key: str | None = None,
    trajectory_key: str = "gen_text_store",
) -> dict[str, Any]:
    totals = {"em": 0.0, "cem": 0.0, "f1": 0.0}
    n = judged = no_answer = 0
    for lineno, record in enumerate(read_jsonl(path), start=1):
        where = f"{path}:{lineno}"
        golds = as_golds(field(record, answer_key, where))
        if pred_key is not None:
            prediction = field(record, pred_key, where)
            prediction = "" if prediction is None else str(prediction)
        else:
            extracted, wrote = read_answer(record, trajectory_key, where)
            no_answer += not wrote
            prediction = extracted or ""
        for name, value in all_metrics(prediction, golds).items():
            totals[name] += value
        if judge_key is not None:
            judged += str(field(record, judge_key, where)).strip().lower() == "true"
        n += 1
    if n == 0:
        raise RecordError(f"{path}: no records")
    summary: dict[str, Any] = {"n": n, **{k: v / n for k, v in totals.items()}}
    if judge_key is not None:
        summary["acc_l"] = judged / n
    if pred_key is None:
        summary["no_answer"] = no_answer
    return summary


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="searchrl eval score", description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("file", help="JSONL, one question per line")
    p.add_argument("--pred-key", default=None, help="key of the extracted answer (default: parse the trajectory)")
    p.add_argument("--answer-key", default="answer", help="key of the gold answer(s) (default: answer)")
    p.add_argument("--judge-key", default=None, help="key of an LLM judge's True/False verdict, for ACC_L")
    p.add_argument(
        "--trajectory-key", default="gen_text_store", help="key of the generated text (default: %(default)s)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (fractions) instead of a table")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        summary = score_file(args.file, args.pred_key, args.answer_key, args.judge_key, args.trajectory_key)
    except (RecordError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary))
        return 0
    cols = [k for k in ("em", "cem", "f1", "acc_l") if k in summary]
    print("| file | n | " + " | ".join(c.upper() for c in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    print(f"| {args.file} | {summary['n']} | " + " | ".join(f"{100 * summary[c]:.1f}" for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
