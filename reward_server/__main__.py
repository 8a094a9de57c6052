"""`python -m reward_server --resolved runs/servers/stage2.json --port 8001` (or `--config FILE`, `--preset NAME`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

import uvicorn

from reward_server.app import SETTINGS_ENV, TOKEN_ENV, ServerSettings, create_app
from searchrl.config import ConfigError
from searchrl.reward.spec import PRESETS, load_reward_spec, resolved_reward_spec
from searchrl.server import Limits, server_token, uvicorn_options


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl reward serve",
        description="Serve format and answer rewards over OpenRLHF's remote-reward protocol (POST /get_reward).",
        epilog=f"Bearer-token auth is on when ${TOKEN_ENV} is set. Presets: {', '.join(sorted(PRESETS))}.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--resolved", type=Path, help="a resolved stage config (JSON, as the agent reads it): its `reward` is the spec"
    )
    src.add_argument("--config", help="a stage config whose `reward:` section is the spec")
    src.add_argument("--preset", choices=sorted(PRESETS), help="a named reward spec instead of --config")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--workers", type=int, default=1, help="server processes sharing the port (default: 1)")
    p.add_argument("--log-jsonl", type=Path, default=None, help="append every scored sample to this JSONL file")
    p.add_argument("--max-body-mb", type=float, default=4.0, help="reject larger request bodies with 413 (default: 4)")
    p.add_argument("--max-items", type=int, default=4096, help="most samples in one request")
    p.add_argument(
        "--max-query-chars", type=int, default=256 * 1024, help="longest query or prompt, in characters (422 over it)"
    )
    p.add_argument("--header-timeout", type=float, default=10.0, help="seconds a request's headers may take")
    p.add_argument("--body-timeout", type=float, default=30.0, help="seconds a request's body may take (408 after)")
    p.add_argument(
        "--max-concurrency", type=int, default=4096, help="open connections or requests in flight before 503s"
    )
    p.add_argument(
        "--allowed-hosts",
        default="",
        help="without a token, Host names answered besides loopback names and IP addresses (comma-separated; *: any)",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="spec overrides, e.g. answer_metric=f1")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    try:
        settings = settings_from_args(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    options = {"host": args.host, "port": args.port, "log_level": "info", "access_log": False}
    options.update(uvicorn_options(settings.limits))
    if args.workers == 1:
        uvicorn.run(create_app(settings), **options)
    else:
        # Worker processes build their own app from the settings passed in the environment. They share keyed
        # answers through a store beside the score log, or, without one, in a folder that lives as long as they do.
        with tempfile.TemporaryDirectory(prefix="searchrl-reward-keys-") as keys:
            if settings.log_jsonl is None:
                settings.key_store = Path(keys) / "answers.sqlite"
            os.environ[SETTINGS_ENV] = settings.to_env()
            uvicorn.run("reward_server.app:app_from_env", factory=True, workers=args.workers, **options)
    return 0


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """The server's settings from its command line, for this command and for its Ray Serve replicas alike;
    ConfigError names the field."""
    if args.resolved is not None:
        if args.overrides:
            raise ConfigError("--resolved: the spec is already resolved; give overrides when resolving it")
        spec = resolved_reward_spec(args.resolved)
    else:
        spec = load_reward_spec(args.config, args.preset, args.overrides)
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    limits = Limits(
        header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout, max_concurrency=args.max_concurrency
    )
    return ServerSettings(
        spec=spec,
        preset=args.preset,
        log_jsonl=args.log_jsonl,
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        max_items=args.max_items,
        max_query_chars=args.max_query_chars,
        token=server_token(None, TOKEN_ENV),
        limits=limits,
        allowed_hosts=tuple(h.strip() for h in f"{args.allowed_hosts},{args.host}".split(",") if h.strip()),
    )


if __name__ == "__main__":
    sys.exit(main())
