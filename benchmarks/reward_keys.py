"""What sharing keyed answers across workers costs (issue 50 item 2): the reward server as training runs it (every
request under an Idempotency-Key of its own, a score log) beside the same server at a baseline commit, before the
shared store, in one run, in alternating slices so both see the same machine load.

Both servers are `python -m reward_server` with the same preset, worker count and score log options; the
baseline runs from a git worktree of `--baseline` (left in a temporary folder and removed after). Reported per
worker count and concurrency: requests/s, p50 latency and server CPU per request of each, their ratio, and that
every served request was logged once (lines in each log = requests answered). Prints a table and writes JSON.

    python -m benchmarks.reward_keys [--baseline REF] [--seconds 6] [--concurrency 1 64 256] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.loadgen import closed_loop, cpu_seconds, process_tree
from benchmarks.reward_server import PRESET, TRAJECTORIES, agent_bodies
from benchmarks.tables import save
from searchrl.paths import ROOT
from searchrl.process import free_port, wait_healthy

# The last commit whose workers kept keyed answers in their own memory only.
BASELINE = "9cace8e"


def start(cwd: Path, workers: int, log: Path) -> tuple[str, subprocess.Popen]:
    port = free_port()
    cmd = [sys.executable, "-m", "reward_server", "--preset", PRESET, "--port", str(port), "--workers", str(workers)]
    proc = subprocess.Popen([*cmd, "--log-jsonl", str(log)], cwd=cwd, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, 60, proc)
    return url, proc


def logged_keys(path: Path) -> tuple[int, int]:
    """(lines, distinct request keys) of a score log; each line opens with its key (reward_server/idempotency.py)."""
    count, keys = 0, set()
    with path.open("rb") as fh:
        for line in fh:
            count += 1
            keys.add(line[: line.find(b'",')])
    return count, len(keys)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default=BASELINE, help=f"the commit to compare with (default: {BASELINE})")
    p.add_argument("--seconds", type=float, default=6.0, help="measuring time per server and point")
    p.add_argument("--rounds", type=int, default=3, help="alternating slices per point")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/reward_keys.json")
    args = p.parse_args()

    bodies = agent_bodies([json.loads(line) for line in TRAJECTORIES.open()])
    baseline = subprocess.run(
        ["git", "rev-parse", args.baseline], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory(prefix="searchrl-reward-keys-") as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), baseline], cwd=ROOT, check=True, capture_output=True
        )
        try:
            for workers in args.workers:
                servers = {}
                for name, cwd in (("baseline", tree), ("shared store", ROOT)):
                    log = Path(tmp) / f"{name.replace(' ', '_')}-{workers}.jsonl"
                    servers[name] = (*start(cwd, workers, log), log)
                try:
                    for url, _, _ in servers.values():
                        asyncio.run(closed_loop(url, "/get_reward", bodies, 16, 1.0, b'{"rewards"', keyed=True))
                    time.sleep(1.0)
                    pids = {name: process_tree(proc.pid) for name, (_, proc, _) in servers.items()}
                    for c in args.concurrency:
                        served = dict.fromkeys(servers, 0)
                        cpu = dict.fromkeys(servers, 0.0)
                        p50: dict[str, list[float]] = {name: [] for name in servers}
                        errors = dict.fromkeys(servers, 0)
                        for _ in range(args.rounds):
                            for name, (url, _, _) in servers.items():
                                before = cpu_seconds(pids[name])
                                r = asyncio.run(
                                    closed_loop(
                                        url,
                                        "/get_reward",
                                        bodies,
                                        c,
                                        args.seconds / args.rounds,
                                        b'{"rewards"',
                                        keyed=True,
                                    )
                                )
                                cpu[name] += cpu_seconds(pids[name]) - before
                                served[name] += r.requests
                                errors[name] += r.errors
                                p50[name].append(r.p50_ms)
                        row = {"workers": workers, "concurrency": c}
                        for name in servers:
                            row[name] = {
                                "rps": served[name] / args.seconds,
                                "p50_ms": max(p50[name]),
                                "server_cpu_us_per_request": round(1e6 * cpu[name] / max(served[name], 1), 1),
                                "errors": errors[name],
                            }
                        row["ratio"] = row["shared store"]["rps"] / row["baseline"]["rps"]
                        rows.append(row)
                        base, shared = row["baseline"], row["shared store"]
                        print(
                            f"workers {workers} c={c:>4}  baseline {base['rps']:6.0f} req/s "
                            f"({base['server_cpu_us_per_request']:.0f} us CPU)  shared store {shared['rps']:6.0f} "
                            f"req/s ({shared['server_cpu_us_per_request']:.0f} us CPU)  ratio {row['ratio']:.3f}",
                            flush=True,
                        )
                finally:
                    for _, proc, _ in servers.values():
                        proc.terminate()
                        proc.wait(30)
                # Each answered request logged once: warm-up and measured requests alike, every key new.
                for name, (_, _, log) in servers.items():
                    count, distinct = logged_keys(log)
                    for r in rows:
                        if r["workers"] == workers:
                            r[name]["log_lines"], r[name]["log_keys_distinct"] = count, distinct
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False, capture_output=True
            )
    loaded = [r for r in rows if r["concurrency"] >= 64]
    result = {
        "benchmark": "reward_keys",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "preset": PRESET,
        "baseline_commit": baseline,
        "requests": "what the agent sends at an episode's end, each with an Idempotency-Key of its own; score log on",
        "seconds_per_point": args.seconds,
        "rounds_per_point": args.rounds,
        "points": rows,
        "target": "requests/s with the shared store >= 0.9 of the baseline's at concurrency >= 64, same workers",
        "target_met": all(r["ratio"] >= 0.9 for r in loaded),
        "load_generator": "benchmarks/loadgen.py, raw HTTP/1.1 keep-alive connections on the same machine",
    }
    save(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
