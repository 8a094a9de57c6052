"""The reward server as a Ray Serve replica: the plain server's app, built in the replica from the server's own
command line and the stage's resolved config (`searchrl servers start --engine ray` deploys it)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI

from reward_server.__main__ import build_parser, settings_from_args
from reward_server.app import create_app


def builder(argv: list[str], resolved: str) -> Callable[[], FastAPI]:
    """What each replica calls to make its app. The resolved stage config travels as text and is written in the
    replica's node (the submitting machine's file need not exist there); `argv` is `searchrl reward serve`'s
    arguments without `--resolved`. Replicas share keyed answers through the store beside `--log-jsonl`."""

    def build() -> FastAPI:
        folder = Path(tempfile.mkdtemp(prefix="searchrl-reward-replica-"))
        (folder / "stage.resolved.json").write_text(resolved, encoding="utf-8")
        args = build_parser().parse_intermixed_args(["--resolved", str(folder / "stage.resolved.json"), *argv])
        return create_app(settings_from_args(args))

    return build
