"""A retried reward request is scored and logged once (issue 23 item 3): the client names each request with an
Idempotency-Key, and the server answers a key it has seen, from memory or, after a kill -9, from its score log."""

from __future__ import annotations

import asyncio
import json
import signal

import httpx

from reward_server.app import ServerSettings, create_app
from searchrl.process import free_port, start_module, stop
from searchrl.reward.spec import STAGE2_ANSWER
from searchrl.rollout.reward_client import RewardClient
from tests.conftest import serve

BODY = {"query": ["q </think><answer> Paris </answer>"], "labels": ["Paris"]}


def logged(path) -> list[dict]:
    """The score log's whole records (a line torn by a kill is skipped, as a reader of the log does)."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def post(url: str, body: dict, key: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return httpx.post(f"{url}/get_reward", json=body, headers=headers)


def test_a_retry_with_the_same_key_is_answered_again_without_scoring_or_logging(tmp_path):
    log = tmp_path / "scored.jsonl"
    with serve(create_app(ServerSettings(spec=STAGE2_ANSWER, log_jsonl=log))) as url:
        first, again = post(url, BODY, "key-1"), post(url, BODY, "key-1")
        other = post(url, BODY, "key-2")
        reused = post(url, {**BODY, "labels": ["Rome"]}, "key-1")
        health = httpx.get(f"{url}/health").json()
    assert first.status_code == again.status_code == other.status_code == 200
    assert again.content == first.content and first.json()["rewards"] == [1.0]
    assert [r["request_id"] for r in logged(log)] == ["key-1", "key-2"]
    assert reused.status_code == 422 and reused.json()["field"] == "Idempotency-Key"
    assert health["scored"] == 2 and health["retries_answered_again"] == 1


def test_concurrent_tries_of_one_request_are_scored_once(tmp_path):
    log = tmp_path / "scored.jsonl"
    big = {"query": ["x " * 40_000 + "</think><answer> Paris </answer>"], "labels": ["Paris"]}  # scored in a thread

    async def tries(url: str) -> list[bytes]:
        async with httpx.AsyncClient() as client:
            answers = await asyncio.gather(
                *(client.post(f"{url}/get_reward", json=big, headers={"Idempotency-Key": "same"}) for _ in range(20))
            )
        return [a.content for a in answers]

    with serve(create_app(ServerSettings(spec=STAGE2_ANSWER, log_jsonl=log))) as url:
        answers = asyncio.run(tries(url))
    assert len(set(answers)) == 1 and json.loads(answers[0])["rewards"] == [1.0]
    assert len(logged(log)) == 1


def test_the_client_sends_one_key_per_sample(tmp_path):
    log = tmp_path / "scored.jsonl"
    with serve(create_app(ServerSettings(spec=STAGE2_ANSWER, log_jsonl=log))) as url:

        async def run():
            client = RewardClient(url)
            try:
                return [await client.score(BODY["query"][0], "", "Paris") for _ in range(3)]
            finally:
                await client.aclose()

        results = asyncio.run(run())
    keys = [r["request_id"] for r in logged(log)]
    assert [r.reward for r in results] == [1.0] * 3 and len(set(keys)) == 3


def test_a_server_killed_after_logging_answers_the_retry_from_its_log(tmp_path):
    """What a kill -9 between the log write and the answer leaves: a sample logged whose answer never left. The
    restarted server finds the key in the log's tail and answers the retry without a second line; a line the
    killed server left torn does not swallow the next one."""
    port = free_port()
    log = tmp_path / "scored.jsonl"
    args = ["--preset", "stage2-answer", "--log-jsonl", str(log)]
    url = f"http://127.0.0.1:{port}"
    proc = start_module("reward_server", args, port, tmp_path / "server.log")
    try:
        first = post(url, BODY, "sent-before-the-kill")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with log.open("ab") as fh:
            fh.write(b'{"query": "a line cut off by the ki')  # a torn last write
        proc = start_module("reward_server", args, port, tmp_path / "server.log")
        retry = post(url, BODY, "sent-before-the-kill")
        fresh = post(url, BODY, "a-new-sample")
    finally:
        stop(proc)
    assert first.status_code == retry.status_code == fresh.status_code == 200
    assert retry.json() == first.json()
    assert [r["request_id"] for r in logged(log)] == ["sent-before-the-kill", "a-new-sample"]
    assert len(log.read_text(encoding="utf-8").splitlines()) == 3  # the torn fragment stays a line of its own
