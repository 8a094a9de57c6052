"""Schema-driven fuzzing (schemathesis) of both servers, started for real on loopback: whatever the
body, they answer with a 2xx or a 4xx, never a 5xx."""

import schemathesis
from hypothesis import HealthCheck, given, settings

from reward_server.app import ServerSettings, create_app
from reward_server.spec import PRESETS
from search_backend.local_faiss import LocalFaissBackend
from search_backend.serve import ServerConfig
from search_backend.serve import create_app as create_search_app
from tests.conftest import serve
from tests.test_search_fixtures import fixture_index

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def fuzz_all_operations(url: str) -> int:
    """Every operation of the app's OpenAPI spec, fuzzed with schemathesis' strategies through hypothesis."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:

        @given(case=operation.as_strategy())
        @FUZZ
        def check(case):
            response = case.call(base_url=url, timeout=60)
            detail = f"{case.method} {case.path}: {response.status_code} {response.text[:300]}"
            assert response.status_code < 500, detail

        check()
    return len(operations)


def test_reward_server_never_answers_5xx():
    with serve(create_app(ServerSettings(spec=PRESETS["stage2-answer"], max_body_bytes=100_000))) as url:
        assert fuzz_all_operations(url) == 2  # POST /get_reward, GET /health


def test_search_server_never_answers_5xx():
    app = create_search_app(ServerConfig(max_top_k=20), backend=LocalFaissBackend(fixture_index()))
    with serve(app) as url:
        assert fuzz_all_operations(url) == 4  # /search, /queries, /retrieve, /health
