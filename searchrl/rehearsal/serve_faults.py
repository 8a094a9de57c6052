"""`python -m searchrl.rehearsal.serve_faults`: stage 1's rollout rehearsal through the servers as Ray Serve
applications on a two-node Ray cluster made on this machine, with one replica of each server killed (kill -9)
while the episodes run.

Two raylets with their own resources form the cluster; `searchrl servers start --engine ray` deploys both servers
into it (retrieval one replica a node, reward on the head), and `searchrl stage rehearse stage1` submits its job to
the same cluster and is pointed at Serve's address. Once the first episode is scored, one retrieval and one reward
replica are killed. Checked: every episode scored, no search failed (the clients' retries reached a live replica),
every sample scored once (the score log's idempotency keys), and Serve back to its replica counts with new
processes. Prints one JSON line; exits 0 when every check held.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from searchrl.episodes.reader import episode_files, read_records
from searchrl.process import free_port, searchrl_command
from searchrl.ray_serve import APPS, app_state, applications, replicas
from searchrl.rehearsal.inputs import REHEARSAL_DIR, rehearsal_index
from searchrl.rehearsal.ray_head import HEAD_ENV, RayHead, RayNode
from searchrl.rehearsal.training import scoring_record

# The rehearsal's preflight reads server records here (searchrl/rehearsal/episodes.py), so it checks the Serve apps.
SERVERS_DIR = REHEARSAL_DIR / "servers"
STAGE_DIR = REHEARSAL_DIR / "stage1_format"
# What the rehearsal's own JSON line says, kept in this one's.
REHEARSAL_KEYS = ("ok", "protocol", "call_form", "episodes", "finished", "scored", "min_reward", "preflight_ok")


def wait_nodes(head: RayHead, count: int, timeout_s: float = 120.0) -> list[str]:
    """The alive nodes' ids once `count` have joined."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            nodes = httpx.get(f"{head.address}/nodes?view=summary", timeout=5).json()["data"]["summary"]
            alive = [n["raylet"]["nodeId"] for n in nodes if n["raylet"].get("state") == "ALIVE"]
            if len(alive) >= count:
                return alive
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{count} Ray nodes did not join within {timeout_s:.0f} s; see {head.log}")


def running(dashboard: str, app: str) -> list[dict[str, Any]]:
    return [r for r in replicas(applications(dashboard).get(app) or {}) if r.get("state") == "RUNNING"]


def kill_when_scored(victims: dict[str, dict[str, Any]], score_log: Path, done: threading.Event, killed: dict) -> None:
    """Waits for the first scored sample, then kills the chosen replica of each server with SIGKILL. The victims are
    chosen before the run: asking Serve's REST API at that moment took up to a second under load, long enough for
    the requests in flight to finish first."""
    while not done.is_set():
        if score_log.is_file() and score_log.stat().st_size > 0:
            break
        time.sleep(0.02)
    else:
        return
    for name, victim in victims.items():
        os.kill(int(victim["pid"]), signal.SIGKILL)
        killed[name] = {"pid": victim["pid"], "node_id": victim["node_id"], "at": time.time()}
    killed["scored_before"] = len(score_log.read_text(encoding="utf-8").splitlines())
    print(f"[serve] killed {killed} after {killed['scored_before']} samples were scored", flush=True)


def wait_restored(dashboard: str, counts: dict[str, int], gone: set[int], timeout_s: float = 180.0) -> dict[str, Any]:
    """Waits until each app runs its replica count again with none of the killed processes."""
    deadline, state = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        state = {}
        for name, app in APPS.items():
            pids = {int(r["pid"]) for r in running(dashboard, app)}
            state[name] = {"running": len(pids), "killed_gone": not (pids & gone)}
        if all(state[n]["running"] >= counts[n] and state[n]["killed_gone"] for n in APPS):
            return {**state, "restored": True}
        time.sleep(1.0)
    return {**state, "restored": False}


def start_servers(head: RayHead, index: Path, port: int, args: argparse.Namespace, log: Path) -> None:
    cmd = searchrl_command(
        "servers", "start", "--engine", "ray", "--ray-address", f"127.0.0.1:{head.gcs_port}", "--index", str(index),
        "--stage", "stage1", "--replicas", str(args.replicas), "--per-node", "--reward-replicas", str(args.replicas),
        "--serve-port", str(port), "--run-dir", str(SERVERS_DIR), "--retrieval-args", f"--latency-s {args.latency_s}",
        *args.overrides,
    )  # fmt: skip
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(cmd, env=head.env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"searchrl servers start --engine ray exited {done.returncode}; see {log}")


def descriptor(head: RayHead, path: Path, num_cpus: int) -> Path:
    """The shared-head descriptor `stage rehearse` submits to (searchrl/rehearsal/ray_head.py)."""
    record = {"address": head.address, "pid": head.proc.pid, "first_port": head.first_port, "log": str(head.log)}
    path.write_text(json.dumps({**record, "num_cpus": num_cpus, "num_gpus": head.num_gpus}), encoding="utf-8")
    return path


def rehearse(head: RayHead, head_file: Path, url: str, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    model = ["--model", args.model] if args.model else []
    cmd = searchrl_command(
        "stage", "rehearse", "stage1", "--episodes", str(args.episodes), *model,
        f"search.urls={url}/retrieval", f"reward_server.urls={url}/reward", *args.overrides,
    )  # fmt: skip
    with log.open("w", encoding="utf-8") as out:
        subprocess.run(cmd, env={**head.env, HEAD_ENV: str(head_file)}, stdout=out, stderr=subprocess.STDOUT)
    lines = [line for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"stage rehearse printed no result; see {log}")
    return json.loads(lines[-1])


def searches(stage_dir: Path) -> dict[str, int]:
    """The kept episodes' searches and failed searches, as the job's own agent recorded them."""
    records = read_records(episode_files(stage_dir), {})
    components = [r.components or {} for r in records]
    return {
        "episodes": len(records),
        "queries": int(sum(c.get("num_queries", 0) for c in components)),
        "search_errors": int(sum(c.get("search_errors", 0) for c in components)),
    }


def proxy_answers(temps: list[Path], into: Path) -> dict[str, int]:
    """The HTTP statuses Serve's proxies answered, counted from their access logs (kept in `into`): a 5xx is a
    request a killed replica dropped, which the client retried."""
    counts: dict[str, int] = {}
    into.mkdir(parents=True, exist_ok=True)
    for temp in temps:
        for log in temp.glob("session_*/logs/serve/proxy_*.log"):
            text = log.read_text(encoding="utf-8", errors="replace")
            (into / f"{temp.name}_{log.name}").write_text(text, encoding="utf-8")
            for status in re.findall(r" (?:POST|GET) \S+ (\d{3}) ", text):
                counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = args.out.resolve()
    work.mkdir(parents=True, exist_ok=True)
    SERVERS_DIR.mkdir(parents=True, exist_ok=True)
    score_log = SERVERS_DIR / "reward.scores.jsonl"
    for stale in (score_log, score_log.with_name(score_log.name + ".keys.sqlite")):
        stale.unlink(missing_ok=True)
    t0 = time.monotonic()
    index = rehearsal_index(REHEARSAL_DIR)
    head = RayHead(work, num_cpus=args.head_cpus, num_gpus=2)
    node: RayNode | None = None
    try:
        head.wait()
        node = RayNode(head, num_cpus=args.node_cpus, resources={"second_node": 1})
        nodes = wait_nodes(head, 2)
        port = free_port()
        start_servers(head, index, port, args, work / "servers_start.log")
        dashboard = head.address
        placed = {n: sorted({r["node_id"] for r in running(dashboard, a)}) for n, a in APPS.items()}
        # Serve's own account of the deployments, as its REST API gives it (tests read a trimmed copy).
        rest = httpx.get(f"{dashboard}/api/serve/applications/", timeout=10).json()
        (work / "serve_applications.json").write_text(json.dumps(rest, indent=1), encoding="utf-8")
        started_s = round(time.monotonic() - t0, 1)
        done, killed = threading.Event(), {}
        victims = {n: running(dashboard, a)[-1] for n, a in APPS.items()}
        killer = threading.Thread(target=kill_when_scored, args=(victims, score_log, done, killed), daemon=True)
        killer.start()
        head_file = descriptor(head, work / "head.json", args.head_cpus + args.node_cpus)
        result = rehearse(head, head_file, f"http://127.0.0.1:{port}", args, work / "rehearse.log")
        done.set()
        killer.join()
        gone = {int(killed[n]["pid"]) for n in APPS if n in killed}
        restored = wait_restored(dashboard, {n: args.replicas for n in APPS}, gone)
        states = {n: app_state(applications(dashboard), a)[1] for n, a in APPS.items()}
        subprocess.run(searchrl_command("servers", "stop", "--run-dir", str(SERVERS_DIR)), env=head.env, check=False)
        answered = proxy_answers([head.temp, node.temp], work / "proxy_logs")
    finally:
        if node is not None:
            node.stop()
        head.stop()
    scoring = scoring_record(score_log)
    found = searches(STAGE_DIR)
    summary = {
        "nodes": len(nodes),
        "replicas_each": args.replicas,
        "retrieval_nodes": len(placed["retrieval"]),
        "reward_nodes": len(placed["reward"]),
        "servers_started_s": started_s,
        "killed": {n: killed[n]["pid"] for n in APPS if n in killed},
        "scored_before_kill": killed.get("scored_before"),
        "proxy_statuses": answered,
        "rehearsal": {k: result.get(k) for k in REHEARSAL_KEYS},
        **found,
        "samples_scored": scoring["samples_scored"],
        "each_key_once": scoring["each_key_once"],
        "keyed": scoring["keyed"],
        "restored": restored,
        "serve_state": states,
        "seconds": round(time.monotonic() - t0, 1),
    }
    summary["ok"] = bool(
        result.get("ok")
        and summary["retrieval_nodes"] == 2
        and len(summary["killed"]) == 2
        and (summary["scored_before_kill"] or 0) < result.get("scored", 0)
        and found["search_errors"] == 0
        and found["queries"] > 0
        and scoring["keyed"]
        and scoring["each_key_once"]
        and scoring["samples_scored"] == result.get("scored")
        and restored["restored"]
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m searchrl.rehearsal.serve_faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--replicas", type=int, default=2, help="replicas of each server")
    p.add_argument("--latency-s", type=float, default=1.0, help="added to each search, so the kills land mid-run")
    p.add_argument("--head-cpus", type=int, default=8)
    p.add_argument("--node-cpus", type=int, default=4)
    p.add_argument("--out", type=Path, default=REHEARSAL_DIR / "serve_faults")
    p.add_argument("--model", default=None, help="the model config the rehearsal stands in for (as stage rehearse)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="stage-config overrides, for servers and job")
    args = p.parse_args(argv)
    try:
        summary = run(args)
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
