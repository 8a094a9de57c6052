"""The HTTP contract of both servers, property-based (schemathesis over each server's own OpenAPI schema), each
server started for real on loopback, with and without a bearer token.

Schema-valid requests must be answered 2xx with a body the response schema allows; invalid ones 4xx; every
status must be documented, every error body must name its field, never a 5xx. Where a schema cannot say it,
the test says it: the reward server's lists are aligned with `query` (and each prompt is a prefix of its
query, each label keeps a word after normalisation), and every answer is aligned with the request. Bounded to
about a minute in all.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from reward_server.app import ServerSettings, create_app
from search_backend.serve.app import ServerConfig
from search_backend.serve.app import create_app as create_search_app
from searchrl.metrics import LabelError, as_golds
from searchrl.reward.spec import PRESETS
from tests.conftest import serve
from tests.test_search_fixtures import fixture_index

TOKEN = "contract-token"
EXAMPLES = 25
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)


# What a valid request may get besides 200: 413, since a body's size is not the schema's to say.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {"expected-statuses": ["200", "413"]},
            "negative_data_rejection": {"expected-statuses": ["401", "403", "404", "405", "408", "413", "415", "422"]},
        }
    }
)
MAX_RESULTS = 2000
K_FIELDS = {"/search": "top_k", "/queries": "k", "/retrieve": "topk"}


def as_the_schema_cannot_say(case):
    """Valid requests as the schemas cannot say them: the reward server's prompts, labels and metadata as long
    as `query` (cut or repeated), each prompt a prefix of its query; at most max_results queries x k."""
    body = case.body
    if case.meta.generation.mode is GenerationMode.NEGATIVE or not isinstance(body, dict):
        return case
    if case.operation.path in K_FIELDS and isinstance(body.get("queries"), list):
        k = body.get(K_FIELDS[case.operation.path], 3)
        if type(k) is int and k > 0:
            del body["queries"][max(1, MAX_RESULTS // k) :]
        return case
    if case.operation.path != "/get_reward" or not isinstance(body.get("query"), list):
        return case
    queries = body["query"]
    for name, filler in (("prompts", ""), ("labels", "x"), ("metadata", {})):
        values = body.get(name)
        if isinstance(values, list) and len(values) != len(queries):
            body[name] = [(values or [filler])[i % max(1, len(values))] for i in range(len(queries))]
    if isinstance(body.get("prompts"), list):
        body["prompts"] = [q[: len(p) % (len(q) + 1)] for q, p in zip(queries, body["prompts"], strict=True)]
    if isinstance(body.get("labels"), list):
        body["labels"] = [_with_a_word(label) for label in body["labels"]]
    return case


def _with_a_word(label: object) -> object:
    """A label whose golds keep a word after normalisation (one that normalises to nothing is refused, 422)."""
    try:
        as_golds(label)
    except LabelError:
        return "x"
    except TypeError:
        pass
    return label


@schemathesis.check
def answers_align_and_errors_name_their_field(ctx, response, case) -> bool | None:
    """A 200 holds one answer per query (at most top_k passages each); a 4xx body names its field."""
    if 400 <= response.status_code < 500:
        error = response.json()
        assert error["detail"].startswith(f"{error['field']}: "), error
        return True
    if response.status_code != 200 or not isinstance(case.body, dict):
        return None
    answer, body = response.json(), case.body
    if case.operation.path == "/get_reward":
        n = len(body["query"])
        assert len(answer["rewards"]) == len(answer["scores"]) == n
        assert all(len(values) == n for values in answer["extra_logs"].values())
    elif case.operation.path == "/search":
        assert len(answer["results"]) == len(body["queries"])
        assert all(len(hits) <= body.get("top_k", 3) for hits in answer["results"])
    elif case.operation.path == "/queries":
        assert answer["queries"] == body["queries"] and len(answer["answers"]) == len(body["queries"])
    elif case.operation.path == "/retrieve":
        assert len(answer["result"]) == len(body["queries"])
    return True


def check_contract(url: str, token: str | None) -> dict[str, int]:
    """Every operation, positive and negative cases, all of schemathesis' checks and ours; how many cases ran."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=CONFIG, headers=headers)
    ran: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        # GET /health takes no input, so it has no invalid requests.
        modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE][: 2 if operation.method == "post" else 1]
        for mode in modes:
            name = f"{operation.method.upper()} {operation.path} {mode.value}"

            @given(case=operation.as_strategy(generation_mode=mode).map(as_the_schema_cannot_say))
            @FUZZ
            def check(case):
                case.call_and_validate(
                    base_url=url,
                    headers=headers,
                    timeout=60,
                    additional_checks=[answers_align_and_errors_name_their_field],
                )
                ran[name] = ran.get(name, 0) + 1  # noqa: B023 - check() runs within this iteration

            check()
    return ran


def check_token_required(url: str) -> None:
    """Without the token every POST is a documented 401 naming Authorization; /health answers only liveness."""
    spec = httpx.get(f"{url}/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            response = httpx.request(method, f"{url}{path}", json={})
            if path == "/health":
                assert response.status_code == 200 and response.json() == {"status": "ok"}
            else:
                assert response.status_code == 401 and response.json()["field"] == "Authorization", path
                assert "401" in operation["responses"], path


@pytest.mark.parametrize("token", [None, TOKEN])
def test_reward_server_keeps_its_contract(token):
    app = create_app(ServerSettings(spec=PRESETS["stage2-answer"], max_body_bytes=100_000, token=token))
    with serve(app) as url:
        ran = check_contract(url, token)
        if token:
            check_token_required(url)
    assert {name.rsplit(" ", 1)[0] for name in ran} == {"GET /health", "POST /get_reward"}
    assert ran["POST /get_reward positive"] >= EXAMPLES // 2


@pytest.mark.parametrize("token", [None, TOKEN])
def test_search_server_keeps_its_contract(token):
    # Over an index directory, so that /admin/reload has something to reload (it is unchanged: 200, no reload).
    config = ServerConfig(index_dir=fixture_index(), max_top_k=20, max_results=MAX_RESULTS, token=token)
    with serve(create_search_app(config)) as url:
        ran = check_contract(url, token)
        if token:
            check_token_required(url)
    assert {name.rsplit(" ", 1)[0] for name in ran} == {
        "GET /health",
        "POST /search",
        "POST /queries",
        "POST /retrieve",
        "POST /admin/reload",
    }
