import asyncio
import typing

import pytest
from pydantic import ValidationError

from searchrl.search.web import PROVIDERS, WebSearchBackend, WebSearchConfig


def test_providers_match_the_config_choices() -> None:
    choices = typing.get_args(WebSearchConfig.model_fields["provider"].annotation)
    assert set(choices) == set(PROVIDERS)


def test_bing_retirement_is_documented() -> None:
    description = WebSearchConfig.model_fields["provider"].description
    assert "Bing" in description and "August 2025" in description


def test_defaults() -> None:
    config = WebSearchConfig()
    assert (config.provider, config.top_k, config.fetch_pages, config.summarize) == ("serper", 3, False, False)
    assert config.allow_private is False and config.summarizer_model == "gpt-4o-mini"


@pytest.mark.parametrize(
    "bad",
    [{"summarize": True}, {"replay_only": True}, {"provider": "bing"}, {"rate_limit_per_s": 0}, {"api_key": "inline"}],
)
def test_invalid_configs(bad: dict) -> None:
    with pytest.raises(ValidationError):
        WebSearchConfig(**bad)


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_from_config_builds_every_provider(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for env in ("SERPER_API_KEY", "BRAVE_API_KEY", "TAVILY_API_KEY", "EXA_API_KEY"):
        monkeypatch.setenv(env, "k")
    monkeypatch.setenv("SEARXNG_URL", "http://127.0.0.1:9")
    config = WebSearchConfig(
        provider=name, site="en.wikipedia.org", fetch_pages=True, summarize=True, cache_path=tmp_path / "c.sqlite"
    )
    backend = WebSearchBackend.from_config(config)
    assert backend.provider.name == name and backend.summarizer is not None
    assert backend.cache_options(3) | {"instruction": None} == {
        "site": "en.wikipedia.org",
        "count": 3,
        "fetch": True,
        "summarize": True,
        "model": "gpt-4o-mini",
        "instruction": None,
    }
    asyncio.run(backend.aclose())
