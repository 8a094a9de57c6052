"""`searchrl servers start|stop`: the retrieval and reward servers in the background, via launch/start_servers.sh.

The script owns the start-up (pid files, logs, port checks, waiting for /health) and is what the preflight
reads back from runs/servers/; this module parses the arguments (so `--help` and a bad flag answer as every other
`searchrl` command does) and hands them to the script, so both ways of starting agree.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from launch import ray_servers
from searchrl.config import ConfigError
from searchrl.paths import RUNS

SCRIPT = Path(__file__).resolve().parent / "start_servers.sh"


def _run_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", default=None, help="pid files, logs and records (default runs/servers)")


def start_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl servers start",
        description="Start the retrieval and reward servers of a training run in the background and wait until "
        "both answer /health; servers started here before are stopped first.",
    )
    p.add_argument("--index", required=True, help="the index directory the retrieval server serves")
    p.add_argument("--stage", default="stage1", help="the stage whose reward the reward server scores (stage1|stage2)")
    p.add_argument("--search-port", type=int, default=8002)
    p.add_argument("--reward-port", type=int, default=8001)
    p.add_argument("--host", default="127.0.0.1", help="address both servers bind")
    p.add_argument(
        "--engine",
        choices=("plain", "ray"),
        default="plain",
        help="plain: one process each on this node; ray: Ray Serve applications in the running Ray cluster",
    )
    _run_dir(p)
    ray_servers.add_arguments(p)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="stage-config overrides, as for the submit")
    return p


def stop_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="searchrl servers stop", description="Stop the servers `servers start` started.")
    _run_dir(p)
    return p


def start(argv: list[str] | None = None) -> int:
    p = start_parser()
    args = p.parse_args(argv)
    for item in args.overrides:
        if "=" not in item:
            p.error(f"{item!r}: overrides are key=value (e.g. reward.answer_metric=f1)")
    if args.engine == "ray":
        try:
            return ray_servers.start(args)
        except ModuleNotFoundError as e:
            print(f"error: --engine ray needs Ray Serve ({e}): pip install -e '.[train]'", file=sys.stderr)
            return 1
        except (ConfigError, TimeoutError, RuntimeError, ConnectionError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    ray_only = [f"--{k.replace('_', '-')}" for k, v in ray_servers.defaults().items() if getattr(args, k) != v]
    if ray_only:
        p.error(f"{', '.join(ray_only)}: only with --engine ray (Ray Serve); the plain servers run one process each")
    script = ["--index", args.index, "--stage", args.stage, "--search-port", str(args.search_port)]
    script += ["--reward-port", str(args.reward_port), "--host", args.host]
    script += ["--run-dir", args.run_dir] if args.run_dir else []
    return subprocess.run(["bash", str(SCRIPT), *script, *args.overrides]).returncode


def stop(argv: list[str] | None = None) -> int:
    args = stop_parser().parse_args(argv)
    # Serve applications `start --engine ray` recorded are removed from their cluster; plain processes stopped.
    ray_servers.stop(Path(args.run_dir or RUNS / "servers"))
    return subprocess.run(
        ["bash", str(SCRIPT), "stop", *(["--run-dir", args.run_dir] if args.run_dir else [])]
    ).returncode
