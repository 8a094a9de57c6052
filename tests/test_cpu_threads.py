"""The thread count of a search: set in the thread that runs it (FAISS keeps one per thread), and every core lent
to it only while the other processes on those cores leave them idle."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from search_backend.serve.app import ServerConfig, create_app, parser, threads_arg
from searchrl.search.index import cpu_threads
from searchrl.search.index.cpu_threads import LEND_BELOW, OtherLoad, ThreadPolicy
from searchrl.search.index.faiss_import import faiss
from tests.conftest import serve as running_server
from tests.test_search_fixtures import fixture_backend

TICK = os.sysconf("SC_CLK_TCK")


class FakeMachine:
    """/proc/stat of a 3-CPU machine whose CPUs 0 and 1 this process may use, its own CPU time and a clock."""

    def __init__(self, path: Path) -> None:
        self.path, self.now, self.own = path, 100.0, 5.0
        self.busy = [0.0, 0.0, 0.0]  # seconds per CPU
        self.write()

    def write(self) -> None:
        lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
        for i, busy in enumerate(self.busy):
            # user nice system idle iowait irq softirq steal guest guest_nice; idle and iowait are not busy
            t = int(busy * TICK)
            lines.append(f"cpu{i} {t // 2} 0 {t - t // 2 - 2} 99999 777 1 1 0 0 0")
        self.path.write_text("\n".join([*lines, "intr 1 2 3", "ctxt 42", "procs_running 2"]) + "\n")

    def run(self, seconds: float, own: float, others: float, outside: float = 0.0) -> None:
        """`seconds` pass; this process uses `own` cores, others `others` cores on CPUs 0-1 and `outside` on 2."""
        self.now += seconds
        self.own += own * seconds
        for cpu in (0, 1):
            self.busy[cpu] += (own + others) * seconds / 2
        self.busy[2] += outside * seconds
        self.write()

    def monitor(self, window_s: float = 0.5) -> OtherLoad:
        return OtherLoad({0, 1}, window_s, self.path, lambda: self.own, lambda: self.now)


def test_other_load_is_the_busy_time_of_our_cores_less_our_own(tmp_path):
    machine = FakeMachine(tmp_path / "stat")
    load = machine.monitor()
    assert load.update() is None  # no window closed yet
    machine.run(0.2, own=1.0, others=0.0)
    assert load.update() is None  # a window is at least half a second
    machine.run(0.8, own=1.0, others=0.0, outside=1.0)
    assert load.update() == pytest.approx(0.0, abs=0.03)  # our own time and CPU 2's are not others' load
    machine.run(1.0, own=1.5, others=0.5)
    assert load.update() == pytest.approx(0.5, abs=0.03)
    machine.run(0.1, own=0.0, others=2.0)
    assert load.update() == pytest.approx(0.5, abs=0.03)  # the last complete window until the next one closes
    machine.run(0.5, own=0.0, others=0.0)
    assert load.update() == pytest.approx(2.0 * 0.1 / 0.6, abs=0.03)


def test_without_proc_stat_nothing_is_lent(tmp_path):
    load = OtherLoad({0, 1}, 0.5, tmp_path / "missing", lambda: 0.0, lambda: 0.0)
    assert load.update() is None
    load.start()  # nothing to sample: no thread
    assert load._thread is None
    policy = ThreadPolicy(base=1, cores=2, monitor=load)
    assert policy.choose() == 1


def test_every_core_is_lent_only_while_other_processes_leave_them_idle(tmp_path):
    machine = FakeMachine(tmp_path / "stat")
    load = machine.monitor()
    policy = ThreadPolicy(base=1, cores=2, monitor=load)
    assert policy.choose() == 1  # nothing measured yet
    chosen = []
    for others in (0.0, 0.1, LEND_BELOW + 0.05, 1.0, 0.0):
        machine.run(0.6, own=1.0, others=others)
        load.update()
        chosen.append(policy.choose())
    assert chosen == [2, 2, 1, 1, 2]
    assert policy.lent == 3
    assert ThreadPolicy(base=2).choose() == 2  # a number given by the user is kept


def test_windows_close_in_their_own_thread_so_a_burst_starts_from_a_fresh_figure(tmp_path):
    # Read lazily, the first window of a burst would span the quiet spell before it (whatever others did then).
    machine = FakeMachine(tmp_path / "stat")
    load = machine.monitor(window_s=0.01)  # 10 ms of the fake clock, tried every 10 ms of real time

    def wait_for(check) -> float:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if load.busy is not None and check(load.busy):
                return load.busy
            time.sleep(0.005)
        raise AssertionError(f"the sampling thread did not close a window (busy {load.busy})")

    load.start()
    try:
        machine.run(0.5, own=0.5, others=1.0)
        assert wait_for(lambda busy: busy > 0.5) == pytest.approx(1.0, abs=0.03)
        machine.run(0.5, own=1.0, others=0.0)
        assert wait_for(lambda busy: busy < LEND_BELOW) == pytest.approx(0.0, abs=0.03)
    finally:
        load.stop()
    assert load._thread is None


def test_a_search_sets_the_thread_count_in_the_thread_that_runs_it(monkeypatch):
    # OpenMP keeps the count per thread: set in the main thread only, FAISS ran every search on every core.
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores: on one, the default is already one thread")
    backend = fixture_backend()
    seen: list[tuple[int, int]] = []
    encode = backend.encoder.encode_queries

    def spy(queries, batch_size=64):
        import torch

        seen.append((torch.get_num_threads(), faiss.omp_get_max_threads()))
        return encode(queries, batch_size=batch_size)

    monkeypatch.setattr(backend.encoder, "encode_queries", spy)
    previous = cpu_threads.configure(1)
    try:
        asyncio.run(backend.search(["Alan Turing"], 3))
        # A fresh thread, as the server's worker threads are, sees its own default until a search sets it.
        fresh = []
        thread = threading.Thread(target=lambda: fresh.append(faiss.omp_get_max_threads()))
        thread.start()
        thread.join()
        assert fresh == [len(os.sched_getaffinity(0))]
        policy = cpu_threads.policy()
        assert policy is not None
        monkeypatch.setattr(policy, "cores", 2)
        monkeypatch.setattr(policy, "monitor", type("Idle", (), {"busy": 0.0, "stop": lambda self: None})())
        asyncio.run(backend.search(["Ada Lovelace"], 3))
        monkeypatch.setattr(policy, "monitor", type("Busy", (), {"busy": 1.0, "stop": lambda self: None})())
        asyncio.run(backend.search(["Grace Hopper"], 3))
    finally:
        cpu_threads.restore(previous)
    assert seen == [(1, 1), (2, 2), (1, 1)]


def test_the_server_applies_its_setting_reports_it_and_restores_the_previous_one():
    import torch

    assert cpu_threads.policy() is None
    config = ServerConfig(cache_size=0, threads="auto")
    before = torch.get_num_threads()
    with running_server(create_app(config, backend=fixture_backend())) as url:
        assert httpx.post(f"{url}/search", json={"queries": ["Alan Turing"]}).status_code == 200
        threads = httpx.get(f"{url}/health").json()["cpu_threads"]
        assert threads["threads"].startswith("auto (") and "searches_on_every_core" in threads
        policy = cpu_threads.policy()
        assert policy is not None
        sampling = policy.monitor is not None and policy.monitor._thread is not None
        assert sampling == (len(os.sched_getaffinity(0)) > 1)
    assert cpu_threads.policy() is None
    assert policy.monitor is None or policy.monitor._thread is None  # the sampling thread ended with the server
    torch.set_num_threads(before)  # the server sized this process's pools; the tests after this one keep theirs
    with running_server(create_app(ServerConfig(cache_size=0), backend=fixture_backend())) as url:
        assert httpx.get(f"{url}/health").json()["cpu_threads"] is None  # a host process keeps its pools


def test_threads_on_the_command_line():
    assert threads_arg("auto") == "auto" and threads_arg("3") == 3
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(Exception, match="whole number >= 1 or auto"):
            threads_arg(bad)
    assert parser().parse_args(["--index", "x"]).threads is None  # main() then picks auto on a CPU
    with pytest.raises(ValueError, match="threads"):
        ServerConfig(threads=0)


def test_the_server_command_shortens_the_openmp_spin_before_torch_loads(monkeypatch):
    # libgomp reads GOMP_SPINCOUNT once, when torch or FAISS loads it: the command sets it before either is imported.
    code = (
        "import os, sys, uvicorn\n"
        "uvicorn.run = lambda *a, **k: None\n"
        "from search_backend.serve import app as serve\n"
        "serve.create_app = lambda config: None\n"
        "serve.main(['--index', 'unused'])\n"
        "print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules or 'faiss' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == [cpu_threads.SPIN_COUNT, "False"], run.stderr
    # A user's own choice stays; once torch is loaded, setting it would do nothing, so it is not set.
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    assert not cpu_threads.short_openmp_spin() and os.environ["GOMP_SPINCOUNT"] == "5"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert not cpu_threads.short_openmp_spin() and "GOMP_SPINCOUNT" not in os.environ
    monkeypatch.delenv("OMP_WAIT_POLICY")
    import torch  # noqa: F401 - loaded in this process already

    assert not cpu_threads.short_openmp_spin() and "GOMP_SPINCOUNT" not in os.environ
