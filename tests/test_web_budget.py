"""The web search budget (searchrl/search/web/budget.py) against the loopback providers: limits, meter, stop."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from searchrl.process import free_port
from searchrl.rollout.environment import Episode, SearchEnvironment
from searchrl.rollout.reward_client import RewardResult
from searchrl.search.base import Passage, SearchBudgetError, SearchError
from searchrl.search.http_client import HttpSearchBackend
from searchrl.search.settings import SearchConfig
from searchrl.search.web import (
    LIST_PRICES,
    PROVIDERS,
    ProviderError,
    ProviderRefusedError,
    WebBudget,
    WebBudgetExhaustedError,
    WebCache,
    WebSearchBackend,
    WebSearchConfig,
)
from searchrl.search.web.budget import NOTICE_ID
from searchrl.stage.config import EpisodeConfig
from tests.conftest import ROOT, serve
from tests.fakes_web import PROVIDER_APPS, FakeControl, web_backend


def gathered(backend: WebSearchBackend, queries: list[str]) -> list[list[Passage] | BaseException]:
    """Each query as its own concurrent search() call, as a rollout batch's episodes send them."""

    async def main() -> list[list[Passage] | BaseException]:
        async with backend:
            calls = (backend.search([q], 3) for q in queries)
            return [
                r if isinstance(r, BaseException) else r[0]
                for r in await asyncio.gather(*calls, return_exceptions=True)
            ]

    return asyncio.run(main())


def stats_after(backend: WebSearchBackend, queries: list[str]) -> tuple[list[Any], dict[str, Any]]:
    """Each query's passages or error, one after another, and then the meter, read before the backend closes it."""

    async def main() -> tuple[list[Any], dict[str, Any]]:
        results: list[Any] = []
        for query in queries:
            try:
                results.append((await backend.search([query], 3))[0])
            except SearchError as exc:
                results.append(exc)
        stats = backend.web_budget.stats()
        await backend.aclose()
        return results, stats

    return asyncio.run(main())


def test_every_provider_has_a_list_price() -> None:
    assert set(LIST_PRICES) == set(PROVIDERS)
    assert LIST_PRICES["searxng"].usd_per_query == 0
    assert all(LIST_PRICES[p].usd_per_query > 0 for p in PROVIDERS if p != "searxng")


def test_no_limit_by_default() -> None:
    config = WebSearchConfig()
    assert (config.max_queries, config.max_usd, config.usd_per_query, config.budget_path) == (None, None, None, None)
    assert config.on_budget_exhausted == "error"


def test_max_queries_stops_exactly_under_concurrency() -> None:
    control = FakeControl()
    budget = WebBudget("serper", max_queries=20)
    with serve(PROVIDER_APPS["serper"](control)) as url:
        results = gathered(web_backend("serper", url, budget=budget), [f"query {i}" for i in range(50)])
    answered = [r for r in results if isinstance(r, list)]
    refused = [r for r in results if isinstance(r, WebBudgetExhaustedError)]
    assert control.calls == 20 and len(answered) == 20 and len(refused) == 30
    assert all(len(r) == 3 for r in answered)


def test_two_backends_on_one_budget_file_share_the_limit(tmp_path: Path) -> None:
    control = FakeControl()
    path = tmp_path / "run" / "budget.sqlite"

    async def main(url: str) -> list[Any]:
        a = web_backend("serper", url, budget=WebBudget("serper", max_queries=20, path=path))
        b = web_backend("serper", url, budget=WebBudget("serper", max_queries=20, path=path))
        async with a, b:
            calls = [x.search([f"{name} {i}"], 3) for i in range(25) for x, name in ((a, "a"), (b, "b"))]
            return await asyncio.gather(*calls, return_exceptions=True)

    with serve(PROVIDER_APPS["serper"](control)) as url:
        results = asyncio.run(main(url))
    assert control.calls == 20 and sum(isinstance(r, WebBudgetExhaustedError) for r in results) == 30


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from searchrl.search.web import WebBudget, WebBudgetExhaustedError

    path, folder, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    budget = WebBudget("serper", max_queries=25, path=path)
    (folder / f"ready-{name}").touch()
    while not (folder / "go").exists():
        time.sleep(0.001)
    kept = 0
    for _ in range(15):
        try:
            budget.reserve(3)
            kept += 1
        except WebBudgetExhaustedError:
            pass
    print(kept)
    """
)


def test_processes_sharing_a_budget_file_never_overshoot(tmp_path: Path) -> None:
    # Training opens one backend per engine process: the file's write lock must order them all.
    path = tmp_path / "budget.sqlite"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(tmp_path), str(n)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    try:
        for n in range(4):
            while not (tmp_path / f"ready-{n}").exists():
                assert children[n].poll() is None, children[n].communicate()[1]
        (tmp_path / "go").touch()
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            child.kill()
    assert all(child.returncode == 0 for child in children), [err for _, err in outputs]
    assert sum(int(out) for out, _ in outputs) == 25
    stats = WebBudget("serper", path=path).stats()
    assert (stats["queries"], stats["refused"]) == (25, 35)


def test_cache_hits_are_free_and_metered_apart(tmp_path: Path) -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS["tavily"](control)) as url:
        cache = WebCache(tmp_path / "web.sqlite")
        backend = web_backend("tavily", url, cache=cache, budget=WebBudget("tavily", max_queries=2))
        results, stats = stats_after(backend, ["a", "b", "a", "b", "a", "b", "c"])
    assert control.calls == 2 and all(isinstance(r, list) for r in results[:6])
    assert isinstance(results[6], WebBudgetExhaustedError)
    assert (stats["queries"], stats["cache_hits"], stats["refused"]) == (2, 4, 1)
    assert stats["usd"] == pytest.approx(2 * 0.008)


def test_max_usd_from_the_list_price() -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS["brave"](control)) as url:
        backend = web_backend("brave", url, budget=WebBudget("brave", max_usd=0.012))
        results, stats = stats_after(backend, ["a", "b", "c"])
    # $0.005 a request: a third would pass $0.012.
    assert control.calls == 2 and isinstance(results[2], WebBudgetExhaustedError)
    assert results[2].field == "search.web.max_usd"
    assert "search.web.max_usd=0.012 reached (2 queries sent to brave, est. $0.0100" in str(results[2])
    assert stats["usd"] == pytest.approx(0.010) and stats["exhausted"] is True


def test_exa_bills_results_beyond_ten() -> None:
    budget = WebBudget("exa")
    assert budget.price_of(3) == pytest.approx(0.007) and budget.price_of(25) == pytest.approx(0.022)


def test_config_overrides_the_price(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", "test-key")
    control = FakeControl()
    with serve(PROVIDER_APPS["tavily"](control)) as url:
        config = WebSearchConfig(
            provider="tavily", base_url=url, rate_limit_per_s=None, usd_per_query=0.25, max_usd=1.0
        )
        results, stats = stats_after(WebSearchBackend.from_config(config), [f"q{i}" for i in range(6)])
    assert control.calls == 4 and [isinstance(r, list) for r in results] == [True] * 4 + [False] * 2
    assert (stats["usd_per_query"], stats["usd"], stats["max_usd"]) == (0.25, 1.0, 1.0)


def test_a_warning_once_at_80_percent(caplog: pytest.LogCaptureFixture) -> None:
    control = FakeControl()
    caplog.set_level(logging.WARNING, logger="searchrl.search.web.budget")
    with serve(PROVIDER_APPS["serper"](control)) as url:
        backend = web_backend("serper", url, budget=WebBudget("serper", max_queries=10))

        async def main() -> list[int]:
            warned = []
            async with backend:
                for i in range(10):
                    await backend.search([f"q{i}"], 3)
                    warned.append(sum("80% of search.web.max_queries=10" in r.message for r in caplog.records))
            return warned

        warned = asyncio.run(main())
    assert warned == [0] * 7 + [1] * 3
    assert any("budget_path is not set" in r.message for r in caplog.records)


def test_error_mode_names_the_limit_and_stops_the_run() -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS["exa"](control)) as url:
        backend = web_backend("exa", url, budget=WebBudget("exa", max_queries=1))
        results, _ = stats_after(backend, ["a", "b"])
    error = results[1]
    assert isinstance(error, WebBudgetExhaustedError) and error.ends_run and error.field == "search.web.max_queries"
    assert str(error).startswith("web search budget exhausted: search.web.max_queries=1 reached (1 queries")
    assert "raise search.web.max_queries" in str(error) and "on_budget_exhausted: notice" in str(error)
    # The environment re-raises an error that ends the run instead of going on with "search failed" blocks.
    with serve(PROVIDER_APPS["exa"](control)) as url:
        backend = web_backend("exa", url, budget=WebBudget("exa", max_queries=0))
        env = SearchEnvironment(backend, EpisodeConfig(top_k=1))
        with pytest.raises(WebBudgetExhaustedError):
            asyncio.run(env.step(Episode(prompt="P", label="x"), "<|begin_of_query|> q <|end_of_query|>"))
        asyncio.run(backend.aclose())


class Rewards:
    """The reward client's one call the environment makes at an episode's end; scoring is tested elsewhere."""

    async def score(self, text: str, prompt: str, label: Any, metadata: dict) -> RewardResult:
        return RewardResult(0.0, 0.0, {})


def test_notice_mode_shows_the_policy_an_explicit_result() -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS["serper"](control)) as url:
        budget = WebBudget("serper", max_queries=20, on_exhausted="notice")
        results = gathered(web_backend("serper", url, budget=budget), [f"query {i}" for i in range(50)])
        assert control.calls == 20
        notices = [r for r in results if isinstance(r, list) and [p.id for p in r] == [NOTICE_ID]]
        assert len(notices) == 30 and "Search budget exhausted" in notices[0][0].text

        backend = web_backend("serper", url, budget=WebBudget("serper", max_queries=1, on_exhausted="notice"))
        env = SearchEnvironment(backend, EpisodeConfig(top_k=3))

        async def episode() -> tuple[list[str], dict[str, float]]:
            ep = Episode(prompt="P", label="x")
            feedback = [(await env.step(ep, f"<|begin_of_query|> {q} <|end_of_query|>")).feedback for q in "ab"]
            logs = (await env.finish(ep, Rewards())).extra_logs  # type: ignore[arg-type]
            await backend.aclose()
            return feedback, logs

        feedback, logs = asyncio.run(episode())
    assert "Alan Turing" in feedback[0] and "Search budget exhausted" not in feedback[0]
    assert "Search budget exhausted: no documents are available" in feedback[1]
    assert (logs["web_queries"], logs["web_refused"], logs["web_cache_hits"]) == (1.0, 1.0, 0.0)
    assert logs["web_usd"] == pytest.approx(0.001) and logs["search_errors"] == 0.0


def test_requests_the_provider_did_not_bill_are_given_back() -> None:
    control = FakeControl(script=["500", "429"], retry_after=None)
    with serve(PROVIDER_APPS["serper"](control)) as url:
        backend = web_backend("serper", url, budget=WebBudget("serper", max_queries=1))
        results, stats = stats_after(backend, ["a", "b"])
        assert control.calls == 3 and isinstance(results[0], list) and isinstance(results[1], WebBudgetExhaustedError)
        assert stats["queries"] == 1
        control.script = ["401"]
        backend = web_backend("serper", url, budget=WebBudget("serper", max_queries=1))
        results, stats = stats_after(backend, ["c"])
    assert isinstance(results[0], ProviderRefusedError) and backend.provider_calls == 1
    assert (stats["queries"], stats["usd"]) == (0, 0)


def test_an_unreachable_provider_costs_nothing() -> None:
    # HttpSession raises NotSentError only when no connection opened: the one failure known to cost nothing.
    budget = WebBudget("serper", max_queries=1)
    backend = web_backend("serper", f"http://127.0.0.1:{free_port()}", budget=budget, retries=2)
    results, stats = stats_after(backend, ["a"])
    assert isinstance(results[0], ProviderError) and "cannot connect" in str(results[0])
    assert backend.provider_calls == 3 and stats["queries"] == 0


def test_a_timed_out_request_counts() -> None:
    control = FakeControl(script=["slow"], slow_s=0.6)
    with serve(PROVIDER_APPS["serper"](control)) as url:
        backend = web_backend("serper", url, budget=WebBudget("serper", max_queries=5), retries=0, timeout_s=0.1)
        results, stats = stats_after(backend, ["a"])
    # It may have been served and billed after the client gave up, so the meter errs high.
    assert isinstance(results[0], ProviderError) and "no answer within" in str(results[0])
    assert control.calls == 1 and stats["queries"] == 1


def test_the_meter_survives_a_restart(tmp_path: Path) -> None:
    control = FakeControl()
    path = tmp_path / "budget.sqlite"
    with serve(PROVIDER_APPS["serper"](control)) as url:
        _, first = stats_after(web_backend("serper", url, budget=WebBudget("serper", path=path)), ["a", "b", "c"])
        backend = web_backend("serper", url, budget=WebBudget("serper", max_queries=4, path=path))
        results, again = stats_after(backend, ["d", "e"])
    assert first["queries"] == 3 and again["queries"] == 4 and control.calls == 4
    assert isinstance(results[1], WebBudgetExhaustedError) and f"counted in {path}" in str(results[1])
    assert again["path"] == str(path) and again["usd"] == pytest.approx(0.004)


async def searched_once(client: Any, query: str) -> list[list[Passage]]:
    try:
        return await client.search([query], 3)
    finally:
        await client.aclose()


def test_health_shows_the_meter_and_the_server_answers_402() -> None:
    from search_backend.serve.app import ServerConfig, create_app

    control = FakeControl()
    with serve(PROVIDER_APPS["serper"](control)) as provider:
        backend = web_backend("serper", provider, budget=WebBudget("serper", max_queries=1))
        app = create_app(ServerConfig(token="", cache_size=0, batching=False), backend=backend)
        with serve(app) as url:
            assert httpx.post(f"{url}/search", json={"queries": ["alan turing"]}).status_code == 200
            refused = httpx.post(f"{url}/search", json={"queries": ["enigma"]})
            # The agent's own client: a 402 ends the run, with the server's message naming the limit.
            client = HttpSearchBackend.from_config(SearchConfig(urls=[url], retries=0))
            with pytest.raises(SearchBudgetError, match="search.web.max_queries=1 reached") as stopped:
                asyncio.run(searched_once(client, "bletchley"))
            assert stopped.value.ends_run
            meter = httpx.get(f"{url}/health").json()["web_budget"]
    assert refused.status_code == 402 and refused.json()["field"] == "search.web.max_queries"
    assert "web search budget exhausted" in refused.json()["detail"]
    assert meter == {
        "provider": "serper",
        "queries": 1,
        "cache_hits": 0,
        "refused": 2,
        "usd": 0.001,
        "usd_per_query": 0.001,
        "max_queries": 1,
        "max_usd": None,
        "exhausted": True,
        "on_exhausted": "error",
        "path": None,
    }
    asyncio.run(backend.aclose())


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"max_queries": -1}, "max_queries"),
        ({"max_usd": -0.5}, "max_usd"),
        ({"max_usd": float("nan")}, "max_usd"),
        ({"usd_per_query": -0.001}, "usd_per_query"),
        ({"on_budget_exhausted": "warn"}, "on_budget_exhausted"),
        ({"max_spend_usd": 5}, "max_spend_usd"),
    ],
)
def test_bad_budget_config_names_the_field(bad: dict, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        SearchConfig(backend="web", web=bad)
    assert f"web.{field}" in str(raised.value)


def test_a_spend_limit_on_a_free_provider_is_refused() -> None:
    with pytest.raises(ValueError, match=r"search\.web\.max_usd: searxng requests are priced at \$0.*max_queries"):
        WebBudget.from_config(WebSearchConfig(provider="searxng", max_usd=5.0))
    assert WebBudget.from_config(WebSearchConfig(provider="searxng", max_usd=5.0, usd_per_query=0.001)).max_usd == 5.0


def test_a_training_stage_with_a_limit_shares_one_meter() -> None:
    """Every vLLM engine process of a job opens the web backend: a limit counted in each would be spent once per
    engine, so a stage with a limit needs an absolute budget_path."""
    from searchrl.stage.search import StageSearchConfig

    web = {"provider": "serper", "max_usd": 5.0}
    for path in (None, "runs/web_budget.sqlite"):
        with pytest.raises(ValidationError, match="web.max_usd: a run's engines each open the web backend"):
            StageSearchConfig.model_validate({"backend": "web", "web": {**web, "budget_path": path}})
    ok = StageSearchConfig.model_validate({"backend": "web", "web": {**web, "budget_path": "/tmp/run.sqlite"}})
    assert ok.web is not None and ok.web.max_usd == 5.0
    assert StageSearchConfig.model_validate({"backend": "web", "web": {"provider": "serper"}}).web is not None
