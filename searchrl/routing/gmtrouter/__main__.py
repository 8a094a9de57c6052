"""python -m searchrl.routing.gmtrouter {train,evaluate,synthesize}: personalised routing from user logs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from searchrl.routing.gmtrouter.checkpoint import CheckpointError
from searchrl.routing.gmtrouter.data import LogError, write_logs
from searchrl.routing.gmtrouter.model import KINDS
from searchrl.routing.gmtrouter.original_format import FORMATS, read_user_logs
from searchrl.routing.gmtrouter.synthetic import synthesize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="searchrl gmtrouter", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    tr = sub.add_parser("train", help="train the personalised router (and its non-personalised twin) on logs")
    tr.add_argument("--logs", type=Path, required=True, help="JSONL: ours (one user a line) or GMTRouter's processed")
    tr.add_argument("--format", choices=FORMATS, default="auto", help="of --logs and --valid-logs (auto: detect)")
    tr.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    tr.add_argument("--model", choices=KINDS, default="hgt", help="hgt: the paper's; sage: the baseline")
    tr.add_argument(
        "--valid-logs", type=Path, default=None, help="validation logs picking the epoch (default: held-out sessions)"
    )
    tr.add_argument("--valid-fraction", type=float, default=0.1, help="latest sessions held out without --valid-logs")
    tr.add_argument("--models", default=None, help="comma-separated model vocabulary (default: models in the logs)")
    tr.add_argument("--llm-descriptions", type=Path, default=None, help="JSON {model: text} LLM nodes embed")
    tr.add_argument("--epochs", type=int, default=None, help="default: hgt 350, sage 60")
    tr.add_argument("--hidden", type=int, default=None, help="default: hgt 128, sage 64")
    tr.add_argument("--layers", type=int, default=None, help="default: hgt 3 (2 with --single-turn), sage 2")
    tr.add_argument("--lr", type=float, default=None, help="default: hgt 5e-4, sage 5e-3")
    tr.add_argument("--single-turn", action="store_true", help="hgt: no session -> previous-session edges")
    tr.add_argument("--prediction-count", type=int, default=256, help="hgt: rated pairs per step")
    tr.add_argument("--eval-every", type=int, default=5, help="hgt: epochs between validations")
    tr.add_argument("--select-by", choices=("auc", "accuracy"), default="auc", help="hgt: the validation metric")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--session-gap-minutes", type=float, default=30.0, help="a longer pause starts a new session")
    tr.add_argument("--encoder", default="all-MiniLM-L6-v2", help="sentence-transformers model for query and LLM text")

    ev = sub.add_parser("evaluate", help="accuracy, AUC, per-user AUC, NDCG@k vs popularity and non-personalised")
    ev.add_argument("--checkpoint", type=Path, required=True)
    ev.add_argument("--logs", type=Path, required=True, help="held-out users or held-out sessions of seen users")
    ev.add_argument("--format", choices=FORMATS, default="auto", help="of --logs (auto: detect)")
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
    from searchrl.routing.gmtrouter.train import TrainConfig, train_checkpoint

    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    users = read_user_logs(args.logs, args.format, models=models)
    valid = read_user_logs(args.valid_logs, args.format, models=models) if args.valid_logs else None
    descriptions = None
    if args.llm_descriptions:
        descriptions = json.loads(args.llm_descriptions.read_text())
        if not isinstance(descriptions, dict) or not all(isinstance(v, str) for v in descriptions.values()):
            raise ValueError(f"--llm-descriptions: {args.llm_descriptions} must hold one JSON object {{model: text}}")
    cfg = TrainConfig(
        model=args.model,
        hidden=args.hidden,
        layers=args.layers,
        epochs=args.epochs,
        lr=args.lr,
        seed=args.seed,
        session_gap_minutes=args.session_gap_minutes,
        temporal=not args.single_turn,
        prediction_count=args.prediction_count,
        eval_every=args.eval_every,
        select_by=args.select_by,
        valid_fraction=args.valid_fraction,
    )
    config = train_checkpoint(
        users, args.out, cfg, valid=valid, models=models, llm_texts=descriptions, encoder=args.encoder
    )
    n = sum(len(u.interactions) for u in users)
    print(f"trained {config.kind} on {len(users)} users, {n} interactions, models {config.models}; wrote {args.out}")
    chosen = config.selection.get("personalised")
    if chosen:
        print(f"kept epoch {chosen['epoch']} ({chosen['metric']} {chosen['value']:.3f} on {chosen['pairs']} pairs)")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from searchrl.routing.gmtrouter.checkpoint import load_config
    from searchrl.routing.gmtrouter.evaluate import evaluate_logs

    config = load_config(args.checkpoint)
    users = read_user_logs(args.logs, args.format, models=config.models if config.kind == "sage" else None)
    report = evaluate_logs(args.checkpoint, users, context_sessions=args.context_sessions, k=args.k)
    out = args.out or args.checkpoint / "evaluation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    cols = ("accuracy", "auc", "per_user_auc", f"ndcg@{args.k}")
    print(f"{'method':<18} " + " ".join(f"{c:>12}" for c in cols) + f" {'pairs':>7}")

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for name, m in report["overall"].items():
        print(f"{name:<18} " + " ".join(f"{fmt(m[c]):>12}" for c in cols) + f" {m['pairs']:>7}")
    print(f"{report['users']} users ({report['seen_users']} seen in training); report: {out}")
    return 0


def _synthesize(args: argparse.Namespace) -> int:

    users = synthesize(args.users, seed=args.seed, personas=args.personas, feedback_noise=args.feedback_noise)
    write_logs(users, args.out)
    print(f"wrote {len(users)} users, {sum(len(u.interactions) for u in users)} interactions to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
