"""What the HTTP contract of both servers left unsaid (issue 23 item 5), each on a real loopback server: the
documented errors, 405 for a wrong method, unknown keys refused everywhere, short echoes, JSON errors that
name their field, and the Host check that stops DNS rebinding."""

from __future__ import annotations

import json

import httpx
import pytest

from reward_server.app import ServerSettings
from reward_server.app import create_app as create_reward_app
from search_backend.serve.app import ServerConfig
from search_backend.serve.app import create_app as create_search_app
from searchrl.reward.spec import STAGE2_ANSWER
from tests.conftest import serve
from tests.test_clients_under_load import EchoBackend

TOKEN = "contract-token"


@pytest.fixture(scope="module")
def reward_url():
    with serve(create_reward_app(ServerSettings(spec=STAGE2_ANSWER))) as url:
        yield url


@pytest.fixture(scope="module")
def search_url():
    with serve(create_search_app(ServerConfig(token="", cache_size=0), backend=EchoBackend())) as url:
        yield url


@pytest.fixture(scope="module")
def search_token_url():
    with serve(create_search_app(ServerConfig(token=TOKEN, cache_size=0), backend=EchoBackend())) as url:
        yield url


def post(url: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(url, content=body, headers={"Content-Type": "application/json", **headers})


@pytest.mark.parametrize("server", ["reward_url", "search_url"])
def test_the_schema_documents_every_error_and_every_answer(server, request):
    spec = httpx.get(f"{request.getfixturevalue(server)}/openapi.json").json()
    posts = {path: ops["post"] for path, ops in spec["paths"].items() if "post" in ops}
    assert posts
    for path, operation in posts.items():
        responses = operation["responses"]
        assert {"200", "401", "403", "408", "413", "415", "422"} <= set(responses), path
        error = responses["422"]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/ErrorBody"}, path
        if path != "/admin/reload":
            assert "$ref" in responses["200"]["content"]["application/json"]["schema"], path  # not just "{}"
    assert set(spec["components"]["schemas"]["ErrorBody"]["required"]) == {"detail", "field"}


@pytest.mark.parametrize("server", ["reward_url", "search_url"])
@pytest.mark.parametrize("method", ["PUT", "POST", "PATCH", "DELETE"])
def test_a_wrong_method_on_health_is_405_naming_the_method(server, method, request):
    response = httpx.request(method, f"{request.getfixturevalue(server)}/health", content=b"x")
    assert response.status_code == 405 and response.headers["allow"] == "GET"
    assert response.json()["field"] == "method"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/retrieve", {"queries": ["a"], "top_k": 50}, "top_k"),
        ("/queries", {"queries": ["a"], "topk": 2}, "topk"),
        ("/search", {"queries": ["a"], "k": 2}, "k"),
    ],
)
def test_unknown_keys_are_refused_on_every_endpoint(search_url, path, body, field):
    response = httpx.post(f"{search_url}{path}", json=body)
    assert response.status_code == 422 and response.json()["field"] == field


@pytest.mark.parametrize(("path", "k"), [("/search", "top_k"), ("/queries", "k"), ("/retrieve", "topk")])
def test_a_huge_integer_is_not_echoed(search_url, path, k):
    body = b'{"queries": ["a"], "%s": %s}' % (k.encode(), b"9" * 4300)
    response = post(f"{search_url}{path}", body)
    assert response.status_code == 422 and response.json()["field"] == k
    assert len(response.text) < 300


@pytest.mark.parametrize(
    ("server", "path", "body", "field"),
    [
        ("reward_url", "/get_reward", b'{"query": ["a"], "labels": ["x"], "metadata": [{"num_searches": NaN}]}',
         "metadata.0.num_searches"),
        ("reward_url", "/get_reward", b'{"query": ["a", "b\\ud800"], "labels": ["x", "y"]}', "query.1"),
        ("reward_url", "/get_reward", b'{"query": ["a"], "labels": ["\xff"]}', "labels.0"),
        ("search_url", "/search", b'{"queries": ["a", "\\udfff b"], "top_k": 2}', "queries.1"),
        ("search_url", "/retrieve", b'{"queries": ["a"], "topk": Infinity}', "topk"),
        ("search_url", "/search", b'{"queries": ["a"], "top_k": 2', "body"),
    ],
)  # fmt: skip
def test_json_errors_name_their_field(server, path, body, field, request):
    response = post(f"{request.getfixturevalue(server)}{path}", body)
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["field"] == field and "column" in answer["detail"]


def test_an_unknown_host_is_refused_without_a_token(search_url, search_token_url):
    body = json.dumps({"query": ["x </think><answer> Paris </answer>"], "labels": ["Paris"]}).encode()
    settings = ServerSettings(spec=STAGE2_ANSWER)
    settings.allowed_hosts = ("trusted.example",)
    with serve(create_reward_app(settings)) as reward_url:
        for host in ("rebound.attacker.example", "rebound.attacker.example:8001"):
            refused = post(f"{reward_url}/get_reward", body, Host=host)
            assert refused.status_code == 403 and refused.json()["field"] == "Host"
            assert httpx.get(f"{search_url}/health", headers={"Host": host}).status_code == 403
        for host in ("localhost", "localhost:8001", "127.0.0.1:8001", "[::1]:8001", "10.1.2.3", "trusted.example:80"):
            assert post(f"{reward_url}/get_reward", body, Host=host).status_code == 200, host
    # With a token a page cannot call the server anyway, whatever its name.
    auth = {"Authorization": f"Bearer {TOKEN}", "Host": "node12.cluster:8002"}
    assert httpx.post(f"{search_token_url}/search", json={"queries": ["a"]}, headers=auth).status_code == 200
