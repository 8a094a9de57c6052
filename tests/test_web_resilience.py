import asyncio
import time
from email.utils import formatdate

import pytest

from searchrl.http_transport import parse_retry_after
from searchrl.search.base import SearchError
from searchrl.search.web import MalformedResponseError, ProviderError
from searchrl.search.web.ratelimit import TokenBucket
from tests.conftest import serve
from tests.fakes_web import CANNED, PROVIDER_APPS, FakeControl, web_backend
from tests.test_web_providers import run_search


def test_429_waits_for_retry_after_then_succeeds() -> None:
    control = FakeControl(script=["429"], retry_after="1")
    with serve(PROVIDER_APPS["serper"](control)) as url:
        start = time.monotonic()
        passages = run_search(web_backend("serper", url), ["q"], 3)[0]
        elapsed = time.monotonic() - start
    assert control.calls == 2 and len(passages) == 3
    assert control.call_times[1] - control.call_times[0] >= 0.9
    assert elapsed < 10


def test_retry_after_is_capped() -> None:
    control = FakeControl(script=["429"], retry_after="3600")
    with serve(PROVIDER_APPS["brave"](control)) as url:
        start = time.monotonic()
        run_search(web_backend("brave", url, retry_after_max_s=0.2), ["q"], 3)
    assert control.calls == 2 and time.monotonic() - start < 5


@pytest.mark.parametrize("name", ["tavily", "exa"])
def test_5xx_is_retried(name: str) -> None:
    control = FakeControl(script=["500", "500"])
    with serve(PROVIDER_APPS[name](control)) as url:
        passages = run_search(web_backend(name, url, retries=2), ["q"], 3)[0]
    assert control.calls == 3 and [p.id for p in passages] == [d.url for d in CANNED[:3]]


def test_persistent_5xx_becomes_a_typed_error_after_the_last_try() -> None:
    control = FakeControl(mode="500")
    with serve(PROVIDER_APPS["serper"](control)) as url, pytest.raises(ProviderError) as caught:
        run_search(web_backend("serper", url, retries=2), ["q"], 3)
    assert control.calls == 3
    assert isinstance(caught.value, SearchError) and "3 tries" in str(caught.value)


@pytest.mark.parametrize("name", list(PROVIDER_APPS))
@pytest.mark.parametrize("broken", ["malformed", "wrong_shape"])
def test_malformed_json_is_retried_then_a_typed_error(name: str, broken: str) -> None:
    control = FakeControl(script=[broken])
    with serve(PROVIDER_APPS[name](control)) as url:
        assert len(run_search(web_backend(name, url), ["q"], 3)[0]) == 3
        control.mode = broken
        with pytest.raises(MalformedResponseError):
            run_search(web_backend(name, url, retries=1), ["q"], 3)
    assert control.calls == 1 + 2 + 1


def test_timeouts_are_retried() -> None:
    control = FakeControl(script=["slow"], slow_s=0.8)
    with serve(PROVIDER_APPS["searxng"](control)) as url:
        passages = run_search(web_backend("searxng", url, timeout_s=0.3), ["q"], 3)[0]
    assert control.calls == 2 and len(passages) == 3


def test_unreachable_provider_is_a_provider_error() -> None:
    with pytest.raises(ProviderError):
        run_search(web_backend("exa", "http://127.0.0.1:9", retries=1), ["q"], 3)


def test_rate_limit_spaces_requests() -> None:
    control = FakeControl()
    with serve(PROVIDER_APPS["serper"](control)) as url:
        run_search(web_backend("serper", url, rate_limit_per_s=10.0), [f"query {i}" for i in range(6)], 3)
    assert control.calls == 6
    # Six requests at 10/s with a burst of one need at least five intervals of 0.1 s.
    assert control.call_times[-1] - control.call_times[0] >= 0.4


def test_token_bucket_allows_a_burst_then_paces() -> None:
    async def main() -> float:
        bucket = TokenBucket(20.0, burst=3)
        start = time.monotonic()
        for _ in range(3):
            await bucket.acquire()
        burst = time.monotonic() - start
        for _ in range(4):
            await bucket.acquire()
        assert burst < 0.1
        return time.monotonic() - start

    assert asyncio.run(main()) >= 0.15
    with pytest.raises(ValueError):
        TokenBucket(0)


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert 50 < parse_retry_after(formatdate(time.time() + 60, usegmt=True)) <= 61
    assert parse_retry_after(formatdate(time.time() - 60, usegmt=True)) == 0.0
