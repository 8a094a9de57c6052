"""What keeps the retrieval server fast: the batching window waits only for callers that are coming, and the
encoder leaves the event loop a core unless no other process uses the cores."""

import asyncio
import os

import httpx

from search_backend.serve.app import ServerConfig, create_app
from search_backend.serve.batching import MicroBatcher
from searchrl.search.index.cpu_threads import ThreadPolicy
from tests.conftest import serve as running_server
from tests.test_search_fixtures import fixture_backend


def counting_search(calls: list[int], seconds: float = 0.0):
    async def search(queries: list[str], top_k: int):
        calls.append(len(queries))
        await asyncio.sleep(seconds)
        return [[] for _ in queries]

    return search


def test_a_lone_caller_does_not_wait_for_the_window():
    calls: list[int] = []

    async def run() -> None:
        # A window far longer than the deadline below: the old batcher waited all of it on every request.
        batcher = MicroBatcher(counting_search(calls), max_batch=64, max_wait_s=60.0)
        batcher.start()
        try:
            for _ in range(3):
                await asyncio.wait_for(batcher.search(["one query"], 3), 10)
        finally:
            await batcher.stop()

    asyncio.run(run())
    assert calls == [1, 1, 1]


def test_callers_that_come_back_keep_sharing_calls():
    calls: list[int] = []

    async def caller(batcher: MicroBatcher, i: int) -> None:
        for _ in range(5):
            await batcher.search([f"query {i}"], 3)
            # Callers come back at different moments, as clients over HTTP do; the window waits for them.
            await asyncio.sleep(0.001 * i)

    async def run() -> None:
        batcher = MicroBatcher(counting_search(calls, 0.01), max_batch=64, max_wait_s=1.0)
        batcher.start()
        try:
            await asyncio.gather(*(caller(batcher, i) for i in range(16)))
        finally:
            await batcher.stop()

    asyncio.run(run())
    assert sum(calls) == 80
    # Without a window the worker takes whoever is back first: most calls would carry one query.
    assert len(calls) <= 8, calls


def closed_loop_calls(callers: int, rounds: int, split_min: int, queries_per_request: int = 1) -> list[int]:
    """Sizes of the backend calls made for `callers` that each send their next request once answered."""
    calls: list[int] = []

    async def caller(batcher: MicroBatcher, i: int) -> None:
        for r in range(rounds):
            await batcher.search([f"query {i} {r} {q}" for q in range(queries_per_request)], 3)

    async def run() -> None:
        batcher = MicroBatcher(counting_search(calls, 0.005), max_batch=64, max_wait_s=1.0, split_min=split_min)
        batcher.start()
        try:
            await asyncio.wait_for(asyncio.gather(*(caller(batcher, i) for i in range(callers))), 60)
        finally:
            await batcher.stop()

    asyncio.run(run())
    assert sum(calls) == callers * rounds * queries_per_request
    return calls


def test_many_callers_fall_into_two_halves_that_take_turns():
    # 64 callers: after the first call carries everyone, each call takes half, the other half being answered
    # and coming back meanwhile; a whole batch of 64 would leave the encoder idle while the loop does that.
    calls = closed_loop_calls(64, 6, split_min=16)
    assert calls[0] == 64 and calls[1:] == [32] * 10, calls
    assert closed_loop_calls(64, 6, split_min=0) == [64] * 6


def test_halves_are_not_taken_below_twice_split_min_or_from_one_caller():
    assert closed_loop_calls(16, 5, split_min=16) == [16] * 5
    assert closed_loop_calls(31, 3, split_min=16) == [31] * 3
    # One caller gains nothing from halves: its request is answered only once all of it is done.
    assert closed_loop_calls(1, 4, split_min=16, queries_per_request=40) == [40] * 4
    assert closed_loop_calls(1, 1, split_min=16, queries_per_request=200) == [64, 64, 64, 8]


def test_auto_threads_leave_a_core_and_lend_it_only_on_a_machine_of_several(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    two = ThreadPolicy.from_setting("auto")
    assert (two.base, two.cores, two.monitor is not None) == (1, 2, True)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert (ThreadPolicy.from_setting("auto").base, ThreadPolicy.from_setting("auto").cores) == (15, 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    one = ThreadPolicy.from_setting("auto")
    assert (one.base, one.monitor) == (1, None)
    assert (ThreadPolicy.from_setting(3).base, ThreadPolicy.from_setting(3).monitor) == (3, None)


def test_the_command_sizes_the_thread_pools_and_create_app_leaves_them_alone(monkeypatch):
    import torch
    import uvicorn

    from search_backend.serve import app as serve_module

    configs: list[ServerConfig] = []
    monkeypatch.setattr(serve_module, "create_app", lambda config: configs.append(config))
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    serve_module.main(["--index", "unused"])
    serve_module.main(["--index", "unused", "--threads", "2", "--split-min", "16"])
    assert [c.threads for c in configs] == ["auto", 2]
    assert [c.split_min for c in configs] == [0, 16]
    service = serve_module.SearchService(fixture_backend(), configs[1])
    assert service.batcher is not None and service.batcher.stats()["split_min"] == 16

    before = torch.get_num_threads()
    with running_server(create_app(ServerConfig(cache_size=0), backend=fixture_backend())) as url:
        assert httpx.post(f"{url}/search", json={"queries": ["Alan Turing"]}).status_code == 200
    assert torch.get_num_threads() == before
