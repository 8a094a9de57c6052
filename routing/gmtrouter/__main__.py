"""python -m routing.gmtrouter {train,evaluate,synthesize}: personalised routing from user logs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from routing.gmtrouter.data import LogError, read_logs, write_logs
from routing.gmtrouter.model import CheckpointError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m routing.gmtrouter", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    tr = sub.add_parser("train", help="train the personalised router (and its non-personalised twin) on logs")
    tr.add_argument("--logs", type=Path, required=True, help="JSONL, one user per line (see README: GMTRouter)")
    tr.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    tr.add_argument("--models", default=None, help="comma-separated model vocabulary (default: models in the logs)")
    tr.add_argument("--epochs", type=int, default=150)
    tr.add_argument("--hidden", type=int, default=64)
    tr.add_argument("--layers", type=int, default=2)
    tr.add_argument("--lr", type=float, default=5e-3)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--session-gap-minutes", type=float, default=30.0, help="a longer pause starts a new session")
    tr.add_argument("--encoder", default="all-MiniLM-L6-v2", help="sentence-transformers model for query text")

    ev = sub.add_parser("evaluate", help="preference accuracy and NDCG@k vs popularity and non-personalised")
    ev.add_argument("--checkpoint", type=Path, required=True)
    ev.add_argument("--logs", type=Path, required=True, help="held-out users or held-out sessions of seen users")
    ev.add_argument(
        "--context-sessions",
        type=int,
        default=3,
        help="each user's first N sessions in --logs are context (after their training history, if seen); "
        "the rest are scored",
    )
    ev.add_argument("--k", type=int, default=3, help="cut-off of NDCG@k")
    ev.add_argument("--out", type=Path, default=None, help="JSON report (default: <checkpoint>/evaluation.json)")

    sy = sub.add_parser("synthesize", help="synthetic users with known, differing model preferences")
    sy.add_argument("--users", type=int, required=True)
    sy.add_argument("--out", type=Path, required=True)
    sy.add_argument("--seed", type=int, default=0)
    sy.add_argument("--personas", type=int, default=4, help="preference profiles users are drawn from")
    sy.add_argument("--feedback-noise", type=float, default=0.1, help="std of the noise added to each rating")

    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "evaluate":
            return _evaluate(args)
        return _synthesize(args)
    except (LogError, CheckpointError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace) -> int:
    from routing.gmtrouter.train import TrainConfig, train_checkpoint

    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    users = read_logs(args.logs, models=models)
    cfg = TrainConfig(
        hidden=args.hidden,
        layers=args.layers,
        epochs=args.epochs,
        lr=args.lr,
        seed=args.seed,
        session_gap_minutes=args.session_gap_minutes,
    )
    config = train_checkpoint(users, args.out, cfg, models=models, encoder=args.encoder)
    n = sum(len(u.interactions) for u in users)
    print(f"trained on {len(users)} users, {n} interactions, models {config.models}; wrote {args.out}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from routing.gmtrouter.evaluate import evaluate_logs
    from routing.gmtrouter.model import load_checkpoint

    models = load_checkpoint(args.checkpoint).config.models
    users = read_logs(args.logs, models=models)
    report = evaluate_logs(args.checkpoint, users, context_sessions=args.context_sessions, k=args.k)
    out = args.out or args.checkpoint / "evaluation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"{'method':<18} {'pref. accuracy':>14} {f'NDCG@{args.k}':>8} {'pairs':>7}")

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for name, m in report["overall"].items():
        print(f"{name:<18} {fmt(m['preference_accuracy']):>14} {fmt(m[f'ndcg@{args.k}']):>8} {m['pairs']:>7}")
    print(f"{report['users']} users ({report['seen_users']} seen in training); report: {out}")
    return 0


def _synthesize(args: argparse.Namespace) -> int:
    from routing.gmtrouter.synthetic import synthesize

    users = synthesize(args.users, seed=args.seed, personas=args.personas, feedback_noise=args.feedback_noise)
    write_logs(users, args.out)
    print(f"wrote {len(users)} users, {sum(len(u.interactions) for u in users)} interactions to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
