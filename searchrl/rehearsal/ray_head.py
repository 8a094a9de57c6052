"""A local Ray head for the rehearsals: loopback only, every port chosen free in one block, its own temp dir,
stopped by the ids of the processes it started.

`python -m searchrl.rehearsal.ray_head --descriptor FILE` keeps one head up for several rehearsals run one after
another (CI's lanes): with $SEARCHRL_RAY_HEAD naming that file, `open_head` hands each rehearsal the running head
instead of starting its own, and the rehearsal leaves it running.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from searchrl.process import venv_first

HEAD_ENV = "SEARCHRL_RAY_HEAD"

RAY_NAMED_PORTS = (
    "gcs",
    "dashboard",
    "client",
    "node_manager",
    "object_manager",
    "agent_listen",
    "agent_grpc",
    "metrics",
    "runtime_env_agent",
)
WORKER_PORTS = 200
# Port blocks held by the live Ray heads on this machine, one file per block: a head's worker ports stay unbound
# until its workers start, so a second head started meanwhile (CI runs two at once) would find them free.
BLOCKS_DIR = Path(tempfile.gettempdir()) / "searchrl-ray-blocks"
# Ray's line when its dashboard, the process that serves the job server, fails to start while `ray start` lives on.
DASHBOARD_FAILED = "The dashboard on node"


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out for port 0 and outgoing connections (Linux's ip_local_port_range)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def ray_ports(rng: random.Random | None = None, tries: int = 50, blocks: Path | None = BLOCKS_DIR) -> dict[str, int]:
    """Every port a Ray head takes, from one block of consecutive free ports below the kernel's
    ephemeral range: the named ports first, then the worker-port range right after them. The range
    cannot overlap a named port by construction (ports picked one by one used to land inside it, and
    `ray start` refused to start), and no port 0 bind or outgoing connection is given a port in it.

    `blocks`: where the block is recorded as held (None: not recorded), so that no other head on the machine
    picks an overlapping one until `release_block()` or this process's exit."""
    rng = rng or random.Random()
    size = len(RAY_NAMED_PORTS) + WORKER_PORTS
    low = 10000
    high = ephemeral_range()[0]
    if high - low < 4 * size:
        low, high = ephemeral_range()[1] + 1, 65535
    if blocks is not None:
        blocks.mkdir(parents=True, exist_ok=True)
    with (blocks / ".lock").open("a") if blocks is not None else open(os.devnull) as lock:
        if blocks is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        held = held_blocks(blocks) if blocks is not None else []
        for _ in range(tries):
            base = rng.randrange(low, high - size)
            if any(abs(base - h) < size for h in held):
                continue
            if all(port_free(p) for p in range(base, base + size)):
                if blocks is not None:
                    (blocks / str(base)).write_text(str(os.getpid()), encoding="utf-8")
                ports = {name: base + i for i, name in enumerate(RAY_NAMED_PORTS)}
                ports["min_worker"] = base + len(RAY_NAMED_PORTS)
                ports["max_worker"] = base + size - 1
                return ports
    raise RuntimeError(f"no block of {size} free ports on 127.0.0.1 after {tries} tries")


def held_blocks(blocks: Path) -> list[int]:
    """The first ports of the blocks live heads hold; a block whose owner process is gone is dropped."""
    held = []
    for f in blocks.glob("[0-9]*"):
        try:
            os.kill(int(f.read_text(encoding="utf-8")), 0)
        except PermissionError:  # another user's live process
            pass
        except (ProcessLookupError, ValueError, OSError):
            f.unlink(missing_ok=True)
            continue
        held.append(int(f.name))
    return held


def release_block(first_port: int, blocks: Path = BLOCKS_DIR) -> None:
    (blocks / str(first_port)).unlink(missing_ok=True)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def head_env() -> dict[str, str]:
    """The environment the head and the `ray job submit` calls against it run in."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}
    env.pop(HEAD_ENV, None)
    # Ray gives each of the dashboard's 9 module processes 30 s to start; on 2 loaded cores (two benchmarks, each
    # training two jobs) one took longer, the dashboard died and no job server ever answered.
    env.setdefault("RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT", "180")
    env["PATH"] = venv_first(env.get("PATH"))
    return env


def job_server_answers(address: str) -> bool:
    try:
        return httpx.get(f"{address}/api/version", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def descendants(root: int) -> list[int]:
    """Every process below `root`, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found.append(child)
            todo.append(child)
    return found


def stop_raylet(proc: subprocess.Popen, temp: Path, first_port: int) -> None:
    """Stops a `ray start --block` and what it started, removes its temp dir and frees its port block."""
    pids = [proc.pid, *descendants(proc.pid)]
    # `ray start --block` stops what it started on SIGTERM; stragglers get SIGKILL, by pid.
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if proc.poll() is None:
        proc.wait(10)
    shutil.rmtree(temp, ignore_errors=True)
    release_block(first_port)


class RayHead:
    """A local Ray head on loopback with every port chosen free and its own temp dir; stopped by the
    ids of the processes it started."""

    def __init__(self, workdir: Path, num_cpus: int = 4, num_gpus: int = 0) -> None:
        """`num_gpus` logical GPUs: OpenRLHF places its actors and engines by GPU bundles."""
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.temp = Path(tempfile.mkdtemp(prefix="srl-ray-"))  # short: Ray's socket paths have a length limit
        self.log = workdir / "ray_head.log"
        self.log.write_bytes(b"")  # appended to by each start, so a failed one's output stays beside the retry's
        self.env = head_env()
        self.launch()

    def launch(self) -> None:
        ports = ray_ports()
        self.first_port = ports[RAY_NAMED_PORTS[0]]
        self.dashboard_port = ports["dashboard"]
        self.gcs_port = ports["gcs"]
        cmd = [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={ports['gcs']}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={ports['dashboard']}",
            f"--ray-client-server-port={ports['client']}",
            f"--node-manager-port={ports['node_manager']}",
            f"--object-manager-port={ports['object_manager']}",
            f"--dashboard-agent-listen-port={ports['agent_listen']}",
            f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
            f"--metrics-export-port={ports['metrics']}",
            f"--runtime-env-agent-port={ports['runtime_env_agent']}",
            f"--min-worker-port={ports['min_worker']}",
            f"--max-worker-port={ports['max_worker']}",
            f"--num-cpus={self.num_cpus}",
            f"--num-gpus={self.num_gpus}",
            "--include-dashboard=true",
            f"--temp-dir={self.temp}",
        ]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def wait(self, timeout_s: float = 180.0, starts: int = 3) -> None:
        """Waits for the job server. A `ray start` that exits while starting, or whose dashboard (the job server's
        process) dies while it lives on, is started again on a fresh port block (twice at most): on a loaded machine
        with another head starting beside it, a start can fail once (seen in CI: two lanes, each starting Ray heads)
        and a whole rehearsal should not fail with it."""
        deadline = time.monotonic() + timeout_s
        dashboards_failed = 0  # the log keeps every start's output: each failure is counted once
        while time.monotonic() < deadline:
            failed = None
            if self.proc.poll() is not None:
                failed = f"ray start exited with {self.proc.returncode}"
            elif self.log_text().count(DASHBOARD_FAILED) > dashboards_failed:
                dashboards_failed += 1
                failed = "Ray's dashboard failed to start"
            if failed:
                self.stop()
                starts -= 1
                if starts <= 0:
                    raise RuntimeError(f"{failed}; see {self.log}:\n{self.log_tail()}")
                print(f"[ray] {failed}; starting again on new ports ({self.log})", flush=True)
                self.temp = Path(tempfile.mkdtemp(prefix="srl-ray-"))
                self.launch()
                continue
            if job_server_answers(self.address):
                return
            time.sleep(0.5)
        raise TimeoutError(f"the Ray head's job server did not answer within {timeout_s:.0f}s; see {self.log}")

    def log_text(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def descendants(self) -> list[int]:
        return descendants(self.proc.pid)

    def stop(self) -> None:
        stop_raylet(self.proc, self.temp, self.first_port)


class RayNode:
    """A second raylet joining a head on this machine, with its own ports and resources: a cluster of two nodes
    made on one machine (Ray places by node, so replicas, proxies and their faults act as on two machines)."""

    def __init__(self, head: RayHead, num_cpus: int, resources: dict[str, float] | None = None) -> None:
        ports = ray_ports()
        self.first_port = ports[RAY_NAMED_PORTS[0]]
        self.log = head.log.with_name(f"ray_node_{self.first_port}.log")
        self.temp = Path(tempfile.mkdtemp(prefix="srl-ray-node-"))
        cmd = [
            str(Path(sys.executable).parent / "ray"),
            "start",
            f"--address=127.0.0.1:{head.gcs_port}",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--node-manager-port={ports['node_manager']}",
            f"--object-manager-port={ports['object_manager']}",
            f"--dashboard-agent-listen-port={ports['agent_listen']}",
            f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
            f"--metrics-export-port={ports['metrics']}",
            f"--runtime-env-agent-port={ports['runtime_env_agent']}",
            f"--min-worker-port={ports['min_worker']}",
            f"--max-worker-port={ports['max_worker']}",
            f"--num-cpus={num_cpus}",
            "--num-gpus=0",
            f"--resources={json.dumps(resources or {})}",
            # Its own temp dir: sharing the head's, both raylets unpacked a job's code into one folder at once and
            # the job read it half-written (a config file "missing").
            f"--temp-dir={self.temp}",
        ]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=head.env, start_new_session=True
            )

    def stop(self) -> None:
        stop_raylet(self.proc, self.temp, self.first_port)


class SharedHead:
    """A head another process keeps up (`python -m searchrl.rehearsal.ray_head`), read from its descriptor file:
    jobs are submitted to it as to a head of one's own, and `stop` leaves it running for the next rehearsal."""

    def __init__(self, descriptor: Path) -> None:
        try:
            d = json.loads(descriptor.read_text(encoding="utf-8"))
            self.address: str = d["address"]
            self.pid: int = int(d["pid"])
            self.num_cpus: int = int(d["num_cpus"])
            self.num_gpus: int = int(d["num_gpus"])
            self.log = Path(d["log"])
        except (OSError, ValueError, KeyError) as e:
            raise RuntimeError(
                f"${HEAD_ENV}={descriptor}: not a running head's descriptor ({e}); start one with "
                "`python -m searchrl.rehearsal.ray_head --descriptor FILE`, or unset it to start a head per rehearsal"
            ) from None
        self.env = head_env()

    def wait(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if job_server_answers(self.address):
                return
            time.sleep(0.5)
        raise TimeoutError(f"the shared Ray head at {self.address} (${HEAD_ENV}) did not answer; see {self.log}")

    def descendants(self) -> list[int]:
        return descendants(self.pid)

    def stop(self) -> None:
        """Left running: its owner stops it."""


# What a rehearsal submits its jobs to: a head of its own or the shared one.
Head = RayHead | SharedHead


def open_head(workdir: Path, num_cpus: int = 4, num_gpus: int = 0) -> Head:
    """The shared head $SEARCHRL_RAY_HEAD names when set (refused when smaller than the job needs: its placement
    group would wait for resources that never come), else a new head of this size."""
    path = os.environ.get(HEAD_ENV)
    if not path:
        return RayHead(workdir, num_cpus=num_cpus, num_gpus=num_gpus)
    head = SharedHead(Path(path))
    if head.num_cpus < num_cpus or head.num_gpus < num_gpus:
        raise RuntimeError(
            f"the shared Ray head (${HEAD_ENV}={path}) has {head.num_cpus} CPUs and {head.num_gpus} logical GPUs; "
            f"this rehearsal needs {num_cpus} and {num_gpus}: start it with more (--num-cpus, --num-gpus)"
        )
    return head


def main(argv: list[str] | None = None) -> int:
    """Starts a head, writes its descriptor once its job server answers, and stops it on SIGTERM or SIGINT."""
    p = argparse.ArgumentParser(prog="python -m searchrl.rehearsal.ray_head", description=main.__doc__)
    p.add_argument("--descriptor", type=Path, required=True, help=f"the file ${HEAD_ENV} is to name")
    p.add_argument("--num-cpus", type=int, default=8)
    p.add_argument("--num-gpus", type=int, default=2, help="logical GPUs: OpenRLHF places its actors by GPU bundles")
    args = p.parse_args(argv)
    args.descriptor.parent.mkdir(parents=True, exist_ok=True)
    args.descriptor.unlink(missing_ok=True)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    head = RayHead(args.descriptor.parent, num_cpus=args.num_cpus, num_gpus=args.num_gpus)
    try:
        head.wait()
        record = {"address": head.address, "pid": head.proc.pid, "first_port": head.first_port}
        record.update(num_cpus=head.num_cpus, num_gpus=head.num_gpus)
        tmp = args.descriptor.with_suffix(".tmp")
        tmp.write_text(json.dumps({**record, "log": str(head.log)}), encoding="utf-8")
        tmp.replace(args.descriptor)
        print(f"[ray] shared head {head.address} ({args.descriptor})", flush=True)
        while not stopping and head.proc.poll() is None:
            time.sleep(0.5)
    finally:
        args.descriptor.unlink(missing_ok=True)
        head.stop()
    return 0 if stopping else 1


if __name__ == "__main__":
    sys.exit(main())
