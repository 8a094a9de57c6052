import asyncio
from pathlib import Path

import pytest

from searchrl.openai_client import endpoint_url
from searchrl.search.web import FetchPolicy, SummarizeError, Summarizer, WebCache
from searchrl.search.web.summarize import is_none_answer
from tests.conftest import serve
from tests.fakes_web import PROVIDER_APPS, Doc, FakeControl, chat_app, pages_app, web_backend
from tests.test_web_providers import run_search

LOOPBACK_OK = FetchPolicy(allow_private=True, timeout_s=5)


def page_docs(pages: str) -> list[Doc]:
    return [
        Doc("Alan Turing", f"{pages}/article", "snippet one", 0.9),
        Doc("Cookies", f"{pages}/irrelevant", "snippet two", 0.8),
        Doc("Binary", f"{pages}/binary", "snippet three", 0.7),
    ]


def summarizer(url: str, **options: object) -> Summarizer:
    return Summarizer(url, "gpt-4o-mini", "llm-key", key_env="OPENAI_API_KEY", backoff_s=0.01, **options)


def test_pages_are_fetched_and_summarised(tmp_path: Path) -> None:
    db = tmp_path / "web.sqlite"
    llm = FakeControl(api_key="llm-key")
    with serve(pages_app()) as pages, serve(chat_app(llm)) as chat:
        search = FakeControl(docs=page_docs(pages))
        with serve(PROVIDER_APPS["serper"](search)) as url:

            def backend() -> object:
                return web_backend(
                    "serper",
                    url,
                    fetch_pages=True,
                    fetch_policy=LOOPBACK_OK,
                    summarizer=summarizer(chat),
                    cache=WebCache(db),
                )

            passages = run_search(backend(), ["who was alan turing"], 3)[0]
            replayed = run_search(backend(), ["who was alan turing"], 3)[0]
    assert passages[0].text.startswith("Summary: Alan Turing")
    # The model answered None for the cookie page; the binary page was refused before any model call.
    assert [p.text for p in passages[1:]] == ["snippet two", "snippet three"]
    assert llm.calls == 2 and search.calls == 1 and replayed == passages
    sent = llm.requests[0]
    assert sent.path == "/v1/chat/completions" and sent.headers["authorization"] == "Bearer llm-key"
    assert sent.json["model"] == "gpt-4o-mini" and sent.json["temperature"] == 0
    assert "who was alan turing" in sent.json["messages"][-1]["content"]
    assert "None" in sent.json["messages"][0]["content"]


def test_fetch_without_summary_keeps_the_page_text_short() -> None:
    with serve(pages_app()) as pages:
        search = FakeControl(docs=page_docs(pages)[:1])
        with serve(PROVIDER_APPS["brave"](search)) as url:
            backend = web_backend("brave", url, fetch_pages=True, fetch_policy=LOOPBACK_OK, max_page_chars=120)
            passage = run_search(backend, ["turing"], 3)[0][0]
    assert passage.text.startswith("Alan Turing\nAlan Mathison Turing") and len(passage.text) == 120


def test_default_fetch_policy_refuses_loopback_and_falls_back_to_snippets() -> None:
    with serve(pages_app()) as pages:
        search = FakeControl(docs=page_docs(pages)[:1])
        with serve(PROVIDER_APPS["serper"](search)) as url:
            passage = run_search(web_backend("serper", url, fetch_pages=True), ["turing"], 3)[0][0]
    assert passage.text == "snippet one"


def test_failed_fetch_is_not_cached_but_a_refusal_is(tmp_path: Path) -> None:
    with serve(pages_app()) as pages:
        search = FakeControl(docs=[Doc("Gone", f"{pages}/missing", "snippet", 0.9)])
        with serve(PROVIDER_APPS["exa"](search)) as url:

            def backend(name: str) -> object:
                return web_backend(
                    "exa", url, fetch_pages=True, fetch_policy=LOOPBACK_OK, cache=WebCache(tmp_path / name)
                )

            assert run_search(backend("a.sqlite"), ["q"], 3)[0][0].text == "snippet"
            assert len(WebCache(tmp_path / "a.sqlite")) == 0
            search.docs = [Doc("Bin", f"{pages}/binary", "snippet", 0.9)]
            run_search(backend("b.sqlite"), ["q"], 3)
            assert len(WebCache(tmp_path / "b.sqlite")) == 1


def test_tavily_raw_content_saves_the_fetch() -> None:
    docs = [Doc("Private", "http://10.0.0.1/page", "snippet", 0.9, raw_content="The page's own text.")]
    search = FakeControl(docs=docs)
    with serve(PROVIDER_APPS["tavily"](search)) as url:
        passage = run_search(web_backend("tavily", url, fetch_pages=True), ["q"], 3)[0][0]
    assert passage.text == "The page's own text."
    assert search.requests[0].json["include_raw_content"] is True


def test_summariser_failure_is_an_error_and_not_cached(tmp_path: Path) -> None:
    llm = FakeControl(api_key="llm-key", mode="500")
    with serve(pages_app()) as pages, serve(chat_app(llm)) as chat:
        search = FakeControl(docs=page_docs(pages)[:1])
        with serve(PROVIDER_APPS["serper"](search)) as url:
            backend = web_backend(
                "serper",
                url,
                fetch_pages=True,
                fetch_policy=LOOPBACK_OK,
                summarizer=summarizer(chat, retries=1),
                cache=WebCache(tmp_path / "c.sqlite"),
            )
            with pytest.raises(SummarizeError):
                run_search(backend, ["q"], 3)
    assert llm.calls == 2 and len(WebCache(tmp_path / "c.sqlite")) == 0


def test_summariser_retries_429_and_reports_a_bad_key() -> None:
    llm = FakeControl(api_key="llm-key", script=["429"], retry_after="0")

    async def main(url: str, key: str) -> str | None:
        s = Summarizer(url + "/v1", "m", key, key_env="OPENAI_API_KEY", backoff_s=0.01)
        try:
            return await s.summarize("q", "title", "some page text")
        finally:
            await s.aclose()

    with serve(chat_app(llm, answer="  A short   answer. ")) as chat:
        assert asyncio.run(main(chat, "llm-key")) == "A short answer."
        with pytest.raises(SummarizeError, match="OPENAI_API_KEY"):
            asyncio.run(main(chat, "wrong"))
    assert llm.calls == 3


def test_helpers() -> None:
    assert (
        endpoint_url("https://api.openai.com/v1", "chat/completions") == "https://api.openai.com/v1/chat/completions"
    )
    assert endpoint_url("http://127.0.0.1:8000/", "chat/completions") == "http://127.0.0.1:8000/v1/chat/completions"
    assert all(is_none_answer(a) for a in ["None", " none. ", '"None"'])
    assert not is_none_answer("None of the sources agree, but X.")
