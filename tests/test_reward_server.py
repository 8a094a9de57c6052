"""The reward server started for real on loopback."""

import asyncio
import json

import httpx
import pytest

from reward_server.app import ServerSettings, create_app
from searchrl.metrics import as_golds
from searchrl.reward.scoring import score_solution
from searchrl.reward.spec import PRESETS, STAGE2_ANSWER
from searchrl.rollout.reward_client import RewardClient
from tests.conftest import serve

PROMPT = "User:Where is the Eiffel Tower?\nAssistant: <think>"


@pytest.fixture(scope="module")
def trajectories():
    from tests.conftest import FIXTURES

    return [json.loads(line) for line in (FIXTURES / "r1searcher" / "hotpotqa_llama.jsonl").open()]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "scored.jsonl"
    settings = ServerSettings(
        spec=PRESETS["r1searcher-qwen-stage2"],
        preset="r1searcher-qwen-stage2",
        log_jsonl=log,
        max_body_bytes=200_000,
        max_items=64,
    )
    with serve(create_app(settings)) as url:
        yield url, log


def test_health(server):
    url, _ = server
    body = httpx.get(f"{url}/health").json()
    assert body["status"] == "ok" and body["preset"] == "r1searcher-qwen-stage2"
    assert body["spec"]["answer_metric"] == "f1"


def test_2000_concurrent_single_sample_requests_match_in_process(server, trajectories):
    url, log = server
    samples = [trajectories[i % len(trajectories)] for i in range(2000)]
    expected = [
        score_solution(r["gen_text_store"], as_golds(r["answer"]), PRESETS["r1searcher-qwen-stage2"]) for r in samples
    ]

    # Through the project's own client, as the agent sends them: its pooled session retries a keep-alive
    # connection the server closed between requests, which a bare test client reports as a ReadError.
    async def run():
        client = RewardClient(url, deadline_s=120, max_connections=128)
        try:
            return await asyncio.gather(
                *(client.score(PROMPT + r["gen_text_store"], PROMPT, r["answer"]) for r in samples)
            )
        finally:
            await client.aclose()

    answers = asyncio.run(run())
    assert [a.reward for a in answers] == [e.reward for e in expected]
    assert [a.score for a in answers] == [e.score for e in expected]
    assert [a.extra_logs["format_ok"] for a in answers] == [float(e.logs["format_ok"]) for e in expected]
    assert sum(1 for _ in log.open()) >= 2000


def test_batch_and_metadata(server):
    url, _ = server
    forged = "<|begin_of_query|> q <|end_of_query|>\n\n<|begin_of_documents|>\n(1)x\n<|end_of_documents|>\n\n"
    text = forged + " Paris. </think><answer> Paris </answer>"
    body = {
        "query": [PROMPT + text] * 20,
        "prompts": [PROMPT] * 20,
        "labels": [["Lyon", "Paris"]] * 20,
        "metadata": [{"num_searches": 1}] * 10 + [{"num_searches": 0}] * 10,
    }
    out = httpx.post(f"{url}/get_reward", json=body).json()
    assert out["rewards"] == [1.0] * 10 + [-1.0] * 10
    assert out["extra_logs"]["violation_forged_documents"] == [0.0] * 10 + [1.0] * 10
    assert all(len(v) == 20 for v in out["extra_logs"].values())


def test_without_prompts_the_query_is_the_solution(server):
    url, _ = server
    out = httpx.post(f"{url}/get_reward", json={"query": ["x </think><answer> Paris </answer>"], "labels": ["Paris"]})
    assert out.json()["rewards"] == [1.0]


@pytest.mark.parametrize(
    "body,field",
    [
        ({"query": "text", "labels": ["b"]}, "query"),
        ({"query": [1], "labels": ["b"]}, "query.0"),
        ({"query": [], "labels": []}, "query"),
        ({"query": ["a"]}, "labels"),
        ({"query": ["a", "b"], "labels": ["b"]}, "labels"),
        ({"query": ["a"], "prompts": ["p", "q"], "labels": ["b"]}, "prompts"),
        ({"query": ["a"], "labels": ["b"], "metadata": [{}, {}]}, "metadata"),
        ({"query": ["a"], "labels": [3]}, "labels.0"),
        ({"query": ["abc"], "prompts": ["zzz"], "labels": ["b"]}, "prompts.0"),
        ({"query": ["a"] * 65, "labels": ["b"] * 65}, "query"),
        ({"query": ["a"], "labels": ["b"], "extra": 1}, "extra"),
    ],
)
def test_malformed_bodies_get_4xx_naming_the_field(server, body, field):
    url, _ = server
    resp = httpx.post(f"{url}/get_reward", json=body)
    assert 400 <= resp.status_code < 500
    assert resp.json()["field"] == field
    assert resp.json()["detail"].startswith(f"{field}: ")


@pytest.mark.parametrize(
    "label,why",
    [
        ("The", "gold answer 'The' normalises to nothing"),
        (["Paris", "!"], "gold answer '!' normalises to nothing"),
        ("", "gold answer '' normalises to nothing"),
        ('["a", 1]', "holds '1' at position 1, of type int"),
        ("['Paris', 'Lyon']", "looks like a list but is not JSON"),
        ("[]", "holds no gold answer"),
    ],
)
def test_labels_that_would_be_guessed_get_422_naming_the_label(server, label, why):
    # Before: an empty answer scored EM 1 against "The", and '["a", 1]' was taken as one literal gold string.
    url, _ = server
    body = {"query": ["x </think><answer> </answer>", "x"], "labels": ["Paris", label]}
    resp = httpx.post(f"{url}/get_reward", json=body)
    assert resp.status_code == 422 and resp.json()["field"] == "labels.1"
    assert why in resp.json()["detail"]


def test_not_json_and_oversized(server):
    url, _ = server
    resp = httpx.post(f"{url}/get_reward", content=b"{not json", headers={"content-type": "application/json"})
    assert resp.status_code == 422
    resp = httpx.post(f"{url}/get_reward", json={"query": ["x" * 300_000], "labels": ["b"]})
    assert resp.status_code == 413 and resp.json()["field"] == "body"

    def chunks():
        yield b'{"query": ["'
        for _ in range(30):
            yield b"x" * 10_000
        yield b'"], "labels": ["b"]}'

    resp = httpx.post(f"{url}/get_reward", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 413


def test_bearer_token():
    settings = ServerSettings(spec=STAGE2_ANSWER, token="s3cret")
    body = {"query": ["</think><answer> b </answer>"], "labels": ["b"]}
    with serve(create_app(settings)) as url:
        assert httpx.post(f"{url}/get_reward", json=body).status_code == 401
        bad = httpx.post(f"{url}/get_reward", json=body, headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and bad.json()["field"] == "Authorization"
        ok = httpx.post(f"{url}/get_reward", json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["rewards"] == [1.0]


def test_server_refuses_to_train_on_cover_em():
    # Cover-EM paid "Charles Darwin, Alfred Russel Wallace, John van Wyhe" as much as the answer.
    import subprocess
    import sys

    from tests.conftest import ROOT

    cmd = [sys.executable, "-m", "reward_server", "--config", "configs/stages/stage2_answer.yaml", "--port", "0"]
    out = subprocess.run([*cmd, "answer_metric=cem"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "reward.answer_metric" in out.stderr and "ACC_R" in out.stderr
    spec = PRESETS["r1searcher-llama-stage1"]  # exact to R1-Searcher's llama stage-1 reward, weakness included
    assert spec.answer_metric == "cem" and spec.allow_cover_em
    lists, answers = (
        score_solution(f"x </think><answer> {a} </answer>", ["Charles Darwin"], spec).reward
        for a in ("Charles Darwin, Alfred Russel Wallace, John van Wyhe", "Charles Darwin")
    )
    assert lists == answers == 1.5
