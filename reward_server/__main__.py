"""`python -m reward_server --config configs/stages/stage2_answer.yaml --port 8001` (or `--preset NAME`)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import uvicorn

from reward_server.app import TOKEN_ENV, ServerSettings, create_app, token_from_env
from reward_server.spec import PRESETS
from rollout.config import ConfigError, load_reward_spec


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reward_server",
        description="Serve format and answer rewards over OpenRLHF's remote-reward protocol (POST /get_reward).",
        epilog=f"Bearer-token auth is on when ${TOKEN_ENV} is set. Presets: {', '.join(sorted(PRESETS))}.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="a stage config whose `reward:` section is the spec")
    src.add_argument("--preset", choices=sorted(PRESETS), help="a named reward spec instead of --config")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--log-jsonl", type=Path, default=None, help="append every scored sample to this JSONL file")
    p.add_argument("--max-body-mb", type=float, default=64.0, help="reject larger request bodies with 413")
    p.add_argument("--max-items", type=int, default=4096, help="most samples in one request")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="spec overrides, e.g. answer_metric=f1")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    try:
        spec = load_reward_spec(args.config, args.preset, args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    settings = ServerSettings(
        spec=spec,
        preset=args.preset,
        log_jsonl=args.log_jsonl,
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        max_items=args.max_items,
        token=token_from_env(),
    )
    logging.basicConfig(level=logging.INFO)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
