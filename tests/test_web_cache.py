import asyncio
import threading
import time
from pathlib import Path

import pytest

from searchrl.search.base import Passage
from searchrl.search.web import CacheMissError, ProviderError, WebCache, WebSearchBackend, WebSearchConfig
from searchrl.search.web.cache import cache_key
from tests.conftest import serve
from tests.fakes_web import PROVIDER_APPS, FakeControl, web_backend
from tests.test_web_providers import run_search

QUERIES = ["who was alan turing", "enigma machine", "bletchley park"]


def test_a_run_replays_with_zero_provider_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "web.sqlite"
    control = FakeControl()
    with serve(PROVIDER_APPS["tavily"](control)) as url:
        first = run_search(web_backend("tavily", url, cache=WebCache(db)), QUERIES, 3)
        again = run_search(web_backend("tavily", url, cache=WebCache(db)), QUERIES, 3)
    assert control.calls == 3 and again == first
    # The replay needs neither the provider nor its key.
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    config = WebSearchConfig(provider="tavily", base_url="http://127.0.0.1:9", cache_path=db, replay_only=True)
    replayed = run_search(WebSearchBackend.from_config(config), QUERIES, 3)
    assert replayed == first and control.calls == 3


def test_replay_only_miss_is_an_error(tmp_path: Path) -> None:
    backend = web_backend("serper", "http://127.0.0.1:9", cache=WebCache(tmp_path / "c.sqlite"), replay_only=True)
    with pytest.raises(CacheMissError, match="never searched"):
        run_search(backend, ["never searched"], 3)


def test_errors_are_never_cached(tmp_path: Path) -> None:
    db = tmp_path / "web.sqlite"
    control = FakeControl(mode="500")
    with serve(PROVIDER_APPS["serper"](control)) as url:
        with pytest.raises(ProviderError):
            run_search(web_backend("serper", url, cache=WebCache(db), retries=0), ["q"], 3)
        assert len(WebCache(db)) == 0
        control.mode = "malformed"
        with pytest.raises(ProviderError):
            run_search(web_backend("serper", url, cache=WebCache(db), retries=0), ["q"], 3)
        assert len(WebCache(db)) == 0
        control.mode = "ok"
        assert len(run_search(web_backend("serper", url, cache=WebCache(db)), ["q"], 3)[0]) == 3
    assert len(WebCache(db)) == 1 and control.calls == 3


def test_options_are_part_of_the_key(tmp_path: Path) -> None:
    db = tmp_path / "web.sqlite"
    control = FakeControl()
    with serve(PROVIDER_APPS["exa"](control)) as url:
        run_search(web_backend("exa", url, cache=WebCache(db)), ["q"], 3)
        run_search(web_backend("exa", url, cache=WebCache(db)), ["q"], 2)
        run_search(web_backend("exa", url, cache=WebCache(db), site="en.wikipedia.org"), ["q"], 3)
        run_search(web_backend("exa", url, cache=WebCache(db)), ["  q "], 3)
    assert control.calls == 3 and len(WebCache(db)) == 3


def test_cache_stores_the_answer_time_and_no_secret(tmp_path: Path) -> None:
    db = tmp_path / "web.sqlite"
    control = FakeControl(api_key="sk-never-on-disk")
    before = time.time()
    with serve(PROVIDER_APPS["brave"](control)) as url:
        backend = web_backend("brave", url, cache=WebCache(db), api_key="sk-never-on-disk")
        run_search(backend, ["alan turing"], 3)
        key = cache_key("brave", "alan turing", backend.cache_options(3))
    answer = WebCache(db).get(key)
    assert answer is not None and len(answer.passages) == 3
    assert before <= answer.answered_at <= time.time()
    assert b"sk-never-on-disk" not in db.read_bytes()


def test_identical_queries_in_flight_share_one_call() -> None:
    control = FakeControl(script=["slow"], slow_s=0.3)
    with serve(PROVIDER_APPS["serper"](control)) as url:
        results = run_search(web_backend("serper", url), ["same", "same", " same", "other"], 3)
    assert control.calls == 2 and results[0] == results[1] == results[2]


def test_cache_is_thread_safe(tmp_path: Path) -> None:
    cache = WebCache(tmp_path / "threads.sqlite")
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(50):
                passages = [Passage(f"u{n}-{i}", "t", "x", 1.0)]
                cache.put(f"k{n}-{i}", "p", "q", {}, passages)
                assert cache.get(f"k{n}-{i}").passages == passages
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 200


def test_first_answer_wins(tmp_path: Path) -> None:
    cache = WebCache(tmp_path / "c.sqlite")
    cache.put("k", "p", "q", {}, [Passage("a", "", "", 1.0)])
    cache.put("k", "p", "q", {}, [Passage("b", "", "", 1.0)])
    assert cache.get("k").passages[0].id == "a"


def test_concurrent_backends_on_one_file(tmp_path: Path) -> None:
    db = tmp_path / "web.sqlite"
    control = FakeControl()

    async def main(url: str) -> None:
        async with (
            web_backend("serper", url, cache=WebCache(db)) as a,
            web_backend("serper", url, cache=WebCache(db)) as b,
        ):
            await asyncio.gather(a.search([f"q{i}" for i in range(5)], 3), b.search([f"r{i}" for i in range(5)], 3))

    with serve(PROVIDER_APPS["serper"](control)) as url:
        asyncio.run(main(url))
    assert len(WebCache(db)) == 10
