"""`searchrl servers start --engine ray`: the retrieval and reward servers as Ray Serve applications in the
running Ray cluster (the one the training job is submitted to), and `servers stop` removing them.

Serve's proxy runs on every node and answers both servers on one port, the retrieval server under `/retrieval`
and the reward server under `/reward`; a proxy prefers replicas on its own node, so an engine given its node's
address searches on its node wherever a replica is there. The reward replicas run on the head node by default:
they share their keyed answers (no retry scored twice) through one SQLite file beside the score log. Records in
runs/servers/ name the applications, as the plain servers' records name their pids, so the preflight checks them.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

from reward_server import ray_deployment as reward_deployment
from search_backend.serve import ray_deployment as retrieval_deployment
from searchrl.config import ConfigError
from searchrl.job.plan import excludes
from searchrl.paths import ROOT
from searchrl.ray_serve import APPS, HEAD_NODE, NAMESPACE, Placement, app_state, application, applications
from searchrl.stage.config import load_stage, stage_config_file

ROUTES = {"retrieval": "/retrieval", "reward": "/reward"}
# The servers' tokens, set on the starting shell, reach the replicas (they inherit `ray start`'s environment).
TOKENS = ("SEARCHRL_SEARCH_TOKEN", "SEARCHRL_REWARD_TOKEN")
READY_TIMEOUT_S = 600.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--engine ray (Ray Serve in the running Ray cluster)")
    g.add_argument("--ray-address", default="auto", help="the Ray cluster (default: the one this node belongs to)")
    g.add_argument("--serve-port", type=int, default=8000, help="the port of Serve's proxy on every node")
    g.add_argument("--replicas", type=int, default=1, help="retrieval replicas (the fewest when autoscaling)")
    g.add_argument("--max-replicas", type=int, default=None, help="autoscale retrieval replicas up to this with load")
    g.add_argument("--per-node", action="store_true", help="at most one retrieval replica a node")
    g.add_argument("--retrieval-cpus", type=float, default=1.0, help="CPUs each retrieval replica holds")
    g.add_argument("--retrieval-gpus", type=float, default=0.0, help="GPUs each holds (0.1: beside a vLLM engine)")
    g.add_argument(
        "--retrieval-resources", type=json.loads, default={}, help="custom Ray resources, e.g. '{\"index\": 1}'"
    )
    g.add_argument("--retrieval-args", default="", help="more `searchrl search serve` flags, e.g. '--nprobe 64'")
    g.add_argument("--reward-replicas", type=int, default=1, help="reward replicas, on the head node")


def defaults() -> dict[str, Any]:
    """The Serve-only options' defaults, by their dest (each flag is `--` + dest with dashes)."""
    p = argparse.ArgumentParser(add_help=False)
    add_arguments(p)
    return vars(p.parse_args([]))


def placements(args: argparse.Namespace) -> dict[str, Placement]:
    try:
        retrieval = Placement(
            replicas=args.replicas,
            max_replicas=args.max_replicas,
            num_cpus=args.retrieval_cpus,
            num_gpus=args.retrieval_gpus,
            max_replicas_per_node=1 if args.per_node else None,
            resources=args.retrieval_resources,
        )
        reward = Placement(replicas=args.reward_replicas, num_cpus=0.5, resources={HEAD_NODE: 0.001})
    except ValueError as e:
        raise ConfigError(f"--replicas/--max-replicas/--retrieval-*: {e}") from None
    return {"retrieval": retrieval, "reward": reward}


def _connect(address: str, upload: bool) -> Any:
    import ray

    # The deployments run the code of this checkout, uploaded as a job's is (the same excludes).
    env: dict[str, Any] = {"working_dir": str(ROOT), "excludes": excludes()} if upload else {}
    tokens = {n: os.environ[n] for n in TOKENS if os.environ.get(n)}
    if tokens:
        env["env_vars"] = tokens
    return ray.init(address=address, namespace=NAMESPACE, runtime_env=env or None, log_to_driver=False)


def _dashboard(context: Any) -> str:
    url = str(context.dashboard_url or "")
    if not url:
        raise RuntimeError("the Ray cluster has no dashboard: Serve's state is read from its REST API (ray[default])")
    return url if url.startswith("http") else f"http://{url}"


def start(args: argparse.Namespace) -> int:
    """Deploys both applications, waits until each runs its replicas, and writes their records."""
    from ray import serve

    run_dir = Path(args.run_dir or ROOT / "runs" / "servers").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    index = Path(args.index).resolve()
    if not (index / "manifest.json").is_file():
        raise ConfigError(f"--index {args.index}: no manifest.json (build one with searchrl index build)")
    stage, _ = load_stage(stage_config_file(args.stage), args.overrides)
    place = placements(args)
    context = _connect(args.ray_address, upload=True)
    dashboard = _dashboard(context)
    serve.start(proxy_location="EveryNode", http_options={"host": args.host, "port": args.serve_port})
    threads = max(1, int(place["retrieval"].num_cpus))
    retrieval_argv = ["--index", str(index), "--host", args.host, "--threads", str(threads)]
    retrieval_argv += shlex.split(args.retrieval_args)
    reward_argv = ["--host", args.host, "--log-jsonl", str(run_dir / "reward.scores.jsonl")]
    builds = {
        "retrieval": retrieval_deployment.builder(retrieval_argv),
        "reward": reward_deployment.builder(reward_argv, stage.model_dump_json()),
    }
    for name, build in builds.items():
        print(f"[servers] deploying {APPS[name]} ({place[name].replicas} replicas) under {ROUTES[name]}", flush=True)
        serve.run(application(name, build, place[name]), name=APPS[name], route_prefix=ROUTES[name])
    _wait_running(dashboard, list(APPS.values()))
    for name in APPS:
        record = {
            "name": name,
            "engine": "ray",
            "url": f"http://{args.host}:{args.serve_port}{ROUTES[name]}",
            "app": APPS[name],
            "dashboard": dashboard,
            "ray_address": args.ray_address,
            "stage": args.stage,
            "index": str(index),
            "placement": place[name].model_dump(),
        }
        (run_dir / f"{name}.json").write_text(json.dumps(record), encoding="utf-8")
        print(f"[servers] {name}: {record['url']} ({APPS[name]}, Ray Serve)", flush=True)
    return 0


def _wait_running(dashboard: str, names: list[str], timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline, said = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        apps = applications(dashboard)
        states = [app_state(apps, n) for n in names]
        if all(ok for ok, _ in states):
            return
        said = "; ".join(f"{n}: {s}" for n, (_, s) in zip(names, states, strict=True))
        time.sleep(1.0)
    raise TimeoutError(f"the Serve applications did not all run within {timeout_s:.0f} s: {said}")


def ray_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records `start` wrote in `run_dir`."""
    found = []
    for name in APPS:
        try:
            record = json.loads((run_dir / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("engine") == "ray":
            found.append(record)
    return found


def stop(run_dir: Path) -> int:
    """Removes the applications the records name (and Serve itself when no other application is left)."""
    records = ray_records(run_dir)
    if not records:
        return 0  # nothing of Ray's to remove: the plain servers' stop needs no Ray installed
    from ray import serve

    _connect(records[0]["ray_address"], upload=False)
    for record in records:
        serve.delete(record["app"])
        (run_dir / f"{record['name']}.json").unlink(missing_ok=True)
        print(f"[servers] removed {record['app']} (Ray Serve)", flush=True)
    if not serve.status().applications:
        serve.shutdown()
    return 0
