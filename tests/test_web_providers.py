import asyncio

import pytest

from searchrl.search.base import Passage, SearchBackend, SearchError
from searchrl.search.web import (
    PROVIDERS,
    MissingCredentialError,
    ProviderRefusedError,
    WebSearchBackend,
    WebSearchConfig,
)
from tests.conftest import serve
from tests.fakes_web import CANNED, PROVIDER_APPS, FakeControl, web_backend

RANK_SCORES = [1.0, 0.5, 1 / 3]
EXPECTED_SCORES = {
    "serper": RANK_SCORES,
    "brave": RANK_SCORES,
    "tavily": [d.score for d in CANNED[:3]],
    "searxng": [d.score * 3 for d in CANNED[:3]],
    "exa": [d.score for d in CANNED[:3]],
}


def run_search(backend: WebSearchBackend, queries: list[str], top_k: int) -> list[list[Passage]]:
    async def main() -> list[list[Passage]]:
        async with backend:
            return await backend.search(queries, top_k)

    return asyncio.run(main())


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_results_map_to_passages_best_first(name: str) -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS[name](control)) as url:
        backend = web_backend(name, url)
        assert isinstance(backend, SearchBackend)
        results = run_search(backend, ["who was  alan turing", "enigma"], 3)
    assert len(results) == 2 and control.calls == 2
    passages = results[0]
    assert [p.id for p in passages] == [d.url for d in CANNED[:3]]
    assert [p.title for p in passages] == [d.title for d in CANNED[:3]]
    assert [p.text for p in passages] == [d.text for d in CANNED[:3]]
    assert [p.score for p in passages] == pytest.approx(EXPECTED_SCORES[name])
    assert all(a.score >= b.score for a, b in zip(passages, passages[1:], strict=False))


REQUEST_SHAPE = {
    "serper": lambda r: (
        r.method == "POST"
        and r.path == "/search"
        and r.headers["x-api-key"] == "test-key"
        and r.json == {"q": "who was alan turing", "num": 3}
    ),
    "brave": lambda r: (
        r.method == "GET"
        and r.path == "/res/v1/web/search"
        and r.headers["x-subscription-token"] == "test-key"
        and r.params == {"q": "who was alan turing", "count": "3"}
    ),
    "tavily": lambda r: (
        r.method == "POST"
        and r.headers["authorization"] == "Bearer test-key"
        and r.json == {"query": "who was alan turing", "max_results": 3, "include_raw_content": False}
    ),
    "searxng": lambda r: r.method == "GET" and r.params == {"q": "who was alan turing", "format": "json"},
    "exa": lambda r: (
        r.method == "POST"
        and r.headers["x-api-key"] == "test-key"
        and r.json["query"] == "who was alan turing"
        and r.json["numResults"] == 3
        and r.json["contents"]["text"]
    ),
}


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_request_follows_the_documented_api(name: str) -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS[name](control)) as url:
        run_search(web_backend(name, url), ["who was alan turing"], 3)
    assert REQUEST_SHAPE[name](control.requests[0]), control.requests[0]


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_site_filter(name: str) -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS[name](control)) as url:
        passages = run_search(web_backend(name, url, site="en.wikipedia.org"), ["alan turing"], 5)[0]
    assert passages and all(p.id.startswith("https://en.wikipedia.org/") for p in passages)
    assert len(passages) == 4
    sent = control.requests[0]
    if name in ("tavily", "exa"):
        assert sent.json.get("include_domains", sent.json.get("includeDomains")) == ["en.wikipedia.org"]
    else:
        query = sent.json["q"] if sent.json else sent.params["q"]
        assert query == "site:en.wikipedia.org alan turing"


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_top_k_caps_results_and_empty_answers_are_fine(name: str) -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS[name](control)) as url:
        assert len(run_search(web_backend(name, url), ["q"], 2)[0]) == 2
        control.docs = []
        assert run_search(web_backend(name, url), ["nothing"], 3) == [[]]


@pytest.mark.parametrize("name", ["serper", "brave", "tavily", "exa"])
def test_missing_key_names_the_env_var(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = PROVIDERS[name].key_env
    monkeypatch.delenv(env, raising=False)
    with pytest.raises(MissingCredentialError, match=env):
        WebSearchBackend.from_config(WebSearchConfig(provider=name))


def test_searxng_needs_a_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEARXNG_URL", raising=False)
    with pytest.raises(MissingCredentialError, match="SEARXNG_URL"):
        WebSearchBackend.from_config(WebSearchConfig(provider="searxng"))


@pytest.mark.parametrize("name", ["serper", "brave", "tavily", "exa"])
def test_wrong_key_is_refused_once_and_never_echoed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    control = FakeControl()
    secret = "sk-super-secret-value"
    monkeypatch.setenv(PROVIDERS[name].key_env, secret)
    with serve(PROVIDER_APPS[name](control)) as url:
        backend = WebSearchBackend.from_config(WebSearchConfig(provider=name, base_url=url, rate_limit_per_s=None))
        assert secret not in repr(backend.provider)
        with pytest.raises(ProviderRefusedError) as caught:
            run_search(backend, ["q"], 3)
    assert control.calls == 1
    assert isinstance(caught.value, SearchError)
    assert "401" in str(caught.value) and PROVIDERS[name].key_env in str(caught.value)
    assert secret not in str(caught.value)


def test_from_config_reads_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    control = FakeControl(api_key="from-env")
    monkeypatch.setenv("MY_SERPER_KEY", "from-env")
    with serve(PROVIDER_APPS["serper"](control)) as url:
        config = WebSearchConfig(provider="serper", base_url=url, api_key_env="MY_SERPER_KEY", rate_limit_per_s=None)
        passages = run_search(WebSearchBackend.from_config(config), ["alan turing"], config.top_k)[0]
    assert [p.id for p in passages] == [d.url for d in CANNED[:3]]


def test_searxng_from_env_url(monkeypatch: pytest.MonkeyPatch) -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS["searxng"](control)) as url:
        monkeypatch.setenv("SEARXNG_URL", url)
        backend = WebSearchBackend.from_config(WebSearchConfig(provider="searxng", rate_limit_per_s=None))
        assert len(run_search(backend, ["alan turing"], 3)[0]) == 3


def test_duplicate_urls_are_dropped() -> None:
    control = FakeControl(docs=[CANNED[0], CANNED[1], CANNED[0], CANNED[2]])
    with serve(PROVIDER_APPS["serper"](control)) as url:
        passages = run_search(web_backend("serper", url), ["q"], 4)[0]
    assert [p.id for p in passages] == [CANNED[0].url, CANNED[1].url, CANNED[2].url]
    assert [p.score for p in passages] == pytest.approx(RANK_SCORES)


def test_searxng_without_json_format_gets_a_hint() -> None:
    control = FakeControl()
    app = PROVIDER_APPS["searxng"](control)

    with serve(app) as url:
        backend = web_backend("searxng", url)
        original = backend.provider.request

        def html_request(*args: object, **kwargs: object) -> object:
            sent = original(*args, **kwargs)
            sent.params["format"] = "html"
            return sent

        backend.provider.request = html_request
        with pytest.raises(ProviderRefusedError, match="search.formats"):
            run_search(backend, ["q"], 3)


def test_empty_queries_cost_nothing() -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS["serper"](control)) as url:
        assert run_search(web_backend("serper", url), ["", "   "], 3) == [[], []]
        assert run_search(web_backend("serper", url), [], 3) == []
    assert control.calls == 0
