import asyncio
import time

import httpx
import pytest

from searchrl.search.web import FetchError, FetchPolicy, FetchRefusedError, fetch_page
from searchrl.search.web.extract import html_to_text
from searchrl.search.web.fetch import Page
from tests.conftest import serve
from tests.fakes_web import ARTICLE, pages_app

LOOPBACK_OK = FetchPolicy(allow_private=True, timeout_s=5)
DEFAULT = FetchPolicy()


def fetch(url: str, policy: FetchPolicy = LOOPBACK_OK) -> Page:
    async def main() -> Page:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await fetch_page(client, url, policy)

    return asyncio.run(main())


def refusal(url: str, policy: FetchPolicy = DEFAULT) -> FetchError:
    with pytest.raises(FetchError) as caught:
        fetch(url, policy)
    return caught.value


def test_article_main_text_is_extracted() -> None:
    with serve(pages_app()) as url:
        page = fetch(f"{url}/article")
    assert page.title == "Alan Turing - Fake Wiki"
    assert "Alan Mathison Turing (23 June 1912 – 7 June 1954)" in page.text
    assert "Turing machine" in page.text
    for noise in ("tracker", "Menu item", "Copyright footer", "color: red"):
        assert noise not in page.text
    assert page.content_type.startswith("text/html")


def test_plain_text_pages() -> None:
    with serve(pages_app()) as url:
        assert fetch(f"{url}/plain").text == "First line.\nSecond line."


def test_extract_without_main_uses_the_body() -> None:
    title, text = html_to_text("<html><body><div>One</div><p>Two &amp; three<br>four</p><script>x</script>")
    assert (title, text) == ("", "One\nTwo & three\nfour")
    assert "Alan Turing" in html_to_text(ARTICLE)[1]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/",
        "http://localhost:9/",
        "http://10.1.2.3/",
        "http://[::1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0/",
        "http://192.168.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://100.64.0.1/",
        "http://224.0.0.1/",
    ],
)
def test_default_policy_refuses_non_public_addresses_before_connecting(url: str) -> None:
    start = time.monotonic()
    error = refusal(url)
    assert isinstance(error, FetchRefusedError) and error.reason == "private address"
    assert time.monotonic() - start < 2


def test_loopback_server_is_refused_by_default() -> None:
    with serve(pages_app()) as url:
        error = refusal(f"{url}/article")
    assert isinstance(error, FetchRefusedError) and "127.0.0.1" in str(error)


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/file.txt", "gopher://example.com/", "javascript:alert(1)"]
)
def test_only_http_and_https(url: str) -> None:
    error = refusal(url)
    assert isinstance(error, FetchRefusedError) and error.reason in ("scheme not allowed", "invalid URL")


def test_oversized_body_is_cut_off() -> None:
    with serve(pages_app()) as url:
        error = refusal(f"{url}/big", FetchPolicy(allow_private=True, max_bytes=100_000))
    assert isinstance(error, FetchRefusedError) and error.reason == "too large"


def test_binary_content_is_refused() -> None:
    with serve(pages_app()) as url:
        error = refusal(f"{url}/binary", LOOPBACK_OK)
    assert isinstance(error, FetchRefusedError) and error.reason == "content type not allowed"
    assert "application/octet-stream" in str(error)


def test_redirects_are_followed_and_rechecked() -> None:
    targets = {"ok": "/article", "private": "http://10.0.0.1/secret", "file": "file:///etc/passwd"}
    only_loopback = FetchPolicy(allow_addresses=frozenset({"127.0.0.1"}), timeout_s=5)
    with serve(pages_app(targets)) as url:
        assert "Alan Mathison Turing" in fetch(f"{url}/redirect/ok", only_loopback).text
        private = refusal(f"{url}/redirect/private", only_loopback)
        scheme = refusal(f"{url}/redirect/file", only_loopback)
        loop = refusal(f"{url}/loop", FetchPolicy(allow_private=True, max_redirects=3))
    assert isinstance(private, FetchRefusedError) and private.reason == "private address"
    assert "10.0.0.1" in str(private)
    assert isinstance(scheme, FetchRefusedError) and scheme.reason == "scheme not allowed"
    assert isinstance(loop, FetchRefusedError) and loop.reason == "too many redirects"


def test_http_errors_and_timeouts_are_failures_not_refusals() -> None:
    with serve(pages_app()) as url:
        missing = refusal(f"{url}/missing", LOOPBACK_OK)
        start = time.monotonic()
        slow = refusal(f"{url}/slow", FetchPolicy(allow_private=True, timeout_s=0.3))
        assert time.monotonic() - start < 3
    assert type(missing) is FetchError and missing.reason == "HTTP error"
    assert type(slow) is FetchError and slow.reason == "timed out"
