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


def two_workers(log):
    """Two workers' apps on one score log (as `--workers 2` runs them: each its own process state, one store)."""
    return serve(create_app(ServerSettings(spec=STAGE2_ANSWER, log_jsonl=log))), serve(
        create_app(ServerSettings(spec=STAGE2_ANSWER, log_jsonl=log))
    )


def test_a_retry_that_reaches_another_worker_is_answered_from_the_first_score_and_not_logged_again(tmp_path):
    """Issue 50 item 2: the first try is scored and logged by one worker, its answer lost; the retry reaches the
    other worker, which answers it from what the first scored."""
    log = tmp_path / "scored.jsonl"
    first_worker, other_worker = two_workers(log)
    with first_worker as a, other_worker as b:
        post(a, BODY, "lost-answer")  # scored and logged; its answer never reaches the client
        retry = post(b, BODY, "lost-answer")
        health_a, health_b = httpx.get(f"{a}/health").json(), httpx.get(f"{b}/health").json()
    assert retry.status_code == 200 and retry.json()["rewards"] == [1.0]
    assert [r["request_id"] for r in logged(log)] == ["lost-answer"]
    assert health_a["scored"] == 1 and health_b["scored"] == 0 and health_b["retries_answered_again"] == 1


def test_tries_of_one_request_at_two_workers_at_once_are_logged_once(tmp_path):
    log = tmp_path / "scored.jsonl"

    async def tries(urls: list[str]) -> list[bytes]:
        async with httpx.AsyncClient() as client:
            answers = await asyncio.gather(
                *(
                    client.post(
                        f"{urls[i % 2]}/get_reward",
                        json={**BODY, "labels": [f"L{k}"]},
                        headers={"Idempotency-Key": f"k{k}"},
                    )
                    for k in range(30)
                    for i in range(4)
                )
            )
        return [a.content for a in answers]

    first_worker, other_worker = two_workers(log)
    with first_worker as a, other_worker as b:
        answers = asyncio.run(tries([a, b]))
        reused = post(b, {**BODY, "labels": ["another body"]}, "k0")
    assert all(len(set(answers[4 * k : 4 * k + 4])) == 1 for k in range(30))
    assert sorted(r["request_id"] for r in logged(log)) == sorted(f"k{k}" for k in range(30))
    assert reused.status_code == 422 and reused.json()["field"] == "Idempotency-Key"


def test_a_key_whose_worker_died_before_marking_it_logged_is_logged_once(tmp_path):
    """A worker killed between inserting a key and marking it logged (its row owned by a dead process): the retry
    writes the lines only when the log lacks them."""
    import sqlite3

    from reward_server.key_store import store_path

    log = tmp_path / "scored.jsonl"
    dead = "4194305:0.00:gone"  # above Linux's largest pid: no such process
    with serve(create_app(ServerSettings(spec=STAGE2_ANSWER, log_jsonl=log))) as url:
        post(url, BODY, "logged-before-the-kill")
        post(url, BODY, "killed-before-its-log-write")
    kept = [line for line in log.read_text().splitlines() if "killed-before-its-log-write" not in line]
    log.write_text("".join(line + "\n" for line in kept))
    with sqlite3.connect(store_path(log)) as db:
        db.execute("UPDATE answers SET owner = ?, logged = 0", (dead,))
    with serve(create_app(ServerSettings(spec=STAGE2_ANSWER, log_jsonl=log))) as url:
        retries = [post(url, BODY, key) for key in ("logged-before-the-kill", "killed-before-its-log-write")] * 2
        health = httpx.get(f"{url}/health").json()
    assert all(r.status_code == 200 and r.json()["rewards"] == [1.0] for r in retries)
    assert [r["request_id"] for r in logged(log)] == ["logged-before-the-kill", "killed-before-its-log-write"]
    assert health["scored"] == 0


def test_workers_of_one_server_answer_every_retry_once(tmp_path):
    """`--workers 2` as a user runs it: every request sent twice on separate connections (the kernel hands each
    to either worker): the log holds each key once and both tries got the same answer."""
    port = free_port()
    log = tmp_path / "scored.jsonl"
    args = ["--preset", "stage2-answer", "--log-jsonl", str(log), "--workers", "2"]
    url = f"http://127.0.0.1:{port}"
    proc = start_module("reward_server", args, port, tmp_path / "server.log")

    async def send(keys: list[str]) -> list[bytes]:
        limits = httpx.Limits(max_keepalive_connections=0)  # a new connection per request, as a retry makes
        async with httpx.AsyncClient(limits=limits) as client:
            answers = await asyncio.gather(
                *(
                    client.post(f"{url}/get_reward", json={**BODY, "labels": [k]}, headers={"Idempotency-Key": k})
                    for k in keys
                )
            )
        assert all(a.status_code == 200 for a in answers)
        return [a.content for a in answers]

    keys = [f"sample-{i}" for i in range(200)]
    try:
        first, again = asyncio.run(send(keys)), asyncio.run(send(keys[::-1]))
    finally:
        stop(proc)
    assert first == again[::-1]
    assert sorted(r["request_id"] for r in logged(log)) == sorted(keys)
