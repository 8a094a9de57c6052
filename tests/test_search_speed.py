"""What keeps the retrieval server fast: the batching window waits only for callers that are coming, and the
encoder leaves the event loop a core."""

import asyncio
import os

import httpx

from search_backend.batching import MicroBatcher
from search_backend.serve import ServerConfig, create_app, default_threads
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


def test_the_server_leaves_a_core_to_its_event_loop(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert default_threads() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert default_threads() == 15
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert default_threads() == 1


def test_the_command_sizes_the_thread_pools_and_create_app_leaves_them_alone(monkeypatch):
    import torch
    import uvicorn

    from search_backend import serve as serve_module

    configs: list[ServerConfig] = []
    monkeypatch.setattr(serve_module, "create_app", lambda config: configs.append(config))
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    serve_module.main(["--index", "unused"])
    serve_module.main(["--index", "unused", "--threads", "2"])
    assert [c.threads for c in configs] == [3, 2]

    before = torch.get_num_threads()
    with running_server(create_app(ServerConfig(cache_size=0), backend=fixture_backend())) as url:
        assert httpx.post(f"{url}/search", json={"queries": ["Alan Turing"]}).status_code == 200
    assert torch.get_num_threads() == before
