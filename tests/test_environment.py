"""The environment step, the recorded-action splitter and the reward client, on literal inputs."""

import asyncio

import pytest

from reward_server.app import ServerSettings, create_app
from searchrl.process import free_port
from searchrl.reward.spec import STAGE2_ANSWER
from searchrl.rollout.engines import recorded_actions
from searchrl.rollout.environment import Episode, SearchEnvironment
from searchrl.rollout.reward_client import RewardClient, RewardServerError
from searchrl.search.base import Passage, SearchError
from searchrl.stage.config import EpisodeConfig
from tests.conftest import serve

DOCS = "\n\n<|begin_of_documents|>\n(1)A\n<|end_of_documents|>\n\n"


class Backend:
    """Stands in for a backend to count calls and fail on demand; the real ones are tested elsewhere."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def search(self, queries, top_k):
        self.calls.append(queries)
        if self.fail:
            raise SearchError("retrieval server down")
        return [[Passage("1", "Title", "Body text", 1.0)][:top_k] for _ in queries]

    async def aclose(self):
        pass


def step(env, ep, text):
    return asyncio.run(env.step(ep, text))


def test_query_triggers_search_and_block():
    backend = Backend()
    env = SearchEnvironment(backend, EpisodeConfig(top_k=1))
    ep = Episode(prompt="P", label="x")
    out = step(env, ep, 'think <|begin_of_query|> "Eiffel"  tower <|end_of_query|>')
    assert backend.calls == [["Eiffel tower"]] and not out.done
    assert out.feedback == "\n\n<|begin_of_documents|>\n(1)Title: Title Text: Body text\n<|end_of_documents|>\n\n"
    assert step(env, ep, " done </think><answer> x </answer>").done
    assert ep.num_searches == 1 and ep.solution.endswith("</answer>")


def test_text_without_query_ends_and_failure_is_counted():
    env = SearchEnvironment(Backend(fail=True), EpisodeConfig())
    ep = Episode(prompt="P", label="x")
    out = step(env, ep, "<|begin_of_query|> q <|end_of_query|>")
    assert not out.done and "The search failed (retrieval server down)" in out.feedback
    assert ep.search_errors == 1 and ep.metadata() == {"num_searches": 1, "search_errors": 1}
    assert step(env, ep, "no query, the end").done


def test_recorded_actions_drop_the_returned_documents():
    traj = "a <|begin_of_query|> q1 <|end_of_query|>" + DOCS + "b <|begin_of_query|> q2 <|end_of_query|>" + DOCS + "c"
    assert recorded_actions(traj) == [
        "a <|begin_of_query|> q1 <|end_of_query|>",
        "b <|begin_of_query|> q2 <|end_of_query|>",
        "c",
    ]
    assert recorded_actions("just an answer") == ["just an answer"]


def test_reward_client_retries_until_the_server_is_back():
    port = free_port()

    async def late_start():
        client = RewardClient(f"http://127.0.0.1:{port}", deadline_s=30)
        task = asyncio.create_task(client.score("x </think><answer> b </answer>", "", "b"))
        await asyncio.sleep(0.8)
        assert not task.done()  # still retrying while nothing listens
        return client, task

    async def run():
        client, task = await late_start()
        with serve(create_app(ServerSettings(spec=STAGE2_ANSWER)), port=port):
            result = await task
        await client.aclose()
        return result

    assert asyncio.run(run()).reward == 1.0


def test_reward_client_does_not_retry_a_refused_sample():
    # The prompt is not inside the query: the server answers 422, which no retry can fix.
    with serve(create_app(ServerSettings(spec=STAGE2_ANSWER))) as url:

        async def run():
            client = RewardClient(url, deadline_s=30)
            try:
                await client.score("text", "not-in-text", "b")
            finally:
                await client.aclose()

        with pytest.raises(RewardServerError, match="refused the sample: 422"):
            asyncio.run(run())


def test_multi_query_block_is_one_batch_and_one_documents_block():
    from searchrl.reward.scoring import score_solution
    from searchrl.reward.spec import STAGE2_ANSWER

    backend = Backend()
    env = SearchEnvironment(backend, EpisodeConfig(top_k=1, max_queries_per_block=3))
    eps = [Episode(prompt="P", label="x"), Episode(prompt="Q", label="x")]
    actions = [
        "<|begin_of_query|> capital of France || Eiffel tower ||  || a || b <|end_of_query|>",
        "<|begin_of_query|> single <|end_of_query|>",
    ]
    out = asyncio.run(env.step_batch(eps, actions))
    assert backend.calls == [["capital of France", "Eiffel tower", "a", "single"]]  # limit 3, empties dropped
    # RAG-R1's layout: each query, then its own documents.
    assert out[0].feedback == (
        "\n\n<|begin_of_documents|>\n(1)Query: capital of France\nDoc 1: Title: Title Text: Body text\n"
        "(2)Query: Eiffel tower\nDoc 1: Title: Title Text: Body text\n"
        "(3)Query: a\nDoc 1: Title: Title Text: Body text\n<|end_of_documents|>\n\n"
    )
    assert out[1].feedback.startswith("\n\n<|begin_of_documents|>\n(1)Query: single\nDoc 1: Title: Title")
    assert (eps[0].num_searches, eps[0].num_queries, eps[1].num_queries) == (1, 3, 1)
    step(env, eps[0], " so </think><answer> x </answer>")
    scored = score_solution(eps[0].solution, ["x"], STAGE2_ANSWER, eps[0].metadata())
    assert scored.logs["format_ok"] == 1.0 and scored.reward == 1.0  # the rules accept the multi-query form


def test_multi_query_off_keeps_the_separator_in_one_query():
    backend = Backend()
    env = SearchEnvironment(backend, EpisodeConfig(top_k=1))
    step(env, Episode(prompt="P", label="x"), "<|begin_of_query|> a || b <|end_of_query|>")
    assert backend.calls == [["a || b"]]


class NamedBackend:
    """Echoes each query back as its passage's text, so a test can see which episode got which answer."""

    def __init__(self) -> None:
        self.requests = 0

    async def search(self, queries, top_k):
        self.requests += 1
        return [[Passage(q, "T", q, 1.0)] for q in queries]

    async def aclose(self):
        pass


def _batch_through_a_real_server(config, queries):
    from search_backend.serve.app import create_app
    from searchrl.search.http_client import HttpSearchBackend

    backend = NamedBackend()
    with serve(create_app(config, backend=backend)) as url:

        async def run():
            async with HttpSearchBackend(url, retries=0) as client:
                env = SearchEnvironment(client, EpisodeConfig(top_k=1))
                eps = [Episode(prompt="P", label="x") for _ in queries]
                actions = [f"<|begin_of_query|> {q} <|end_of_query|>" for q in queries]
                return env, eps, await env.step_batch(eps, actions)

        return (backend, *asyncio.run(run()))


def test_one_refused_query_fails_only_its_own_episode():
    # Seen in `eval local`: one query over the server's max_query_chars made the whole batch's request a 422,
    # and all 200 episodes got "search failed" (held-out EM 0.47 -> 0.01).
    from search_backend.serve.app import ServerConfig

    queries = [f"person {i}" for i in range(200)]
    queries[137] = "x" * 600
    backend, env, eps, out = _batch_through_a_real_server(
        ServerConfig(token="", batching=False, max_query_chars=512), queries
    )
    failed = [i for i, ep in enumerate(eps) if ep.search_errors]
    assert failed == [137] and "over the limit of 512" in out[137].feedback
    assert all(f"Text: person {i}\n" in out[i].feedback for i in range(200) if i != 137)
    assert env.failed_searches == 1 and backend.requests <= 2 * 8  # halving: about two requests per level


def test_a_batch_over_the_servers_query_limit_is_asked_in_parts():
    from search_backend.serve.app import ServerConfig

    queries = [f"person {i}" for i in range(100)]
    backend, env, eps, out = _batch_through_a_real_server(
        ServerConfig(token="", batching=False, max_queries=16), queries
    )
    assert not any(ep.search_errors for ep in eps) and env.failed_searches == 0
    assert all(f"Text: person {i}\n" in out[i].feedback for i in range(100))
    assert backend.requests == 8  # 100 -> 50 -> 25 -> 12 or 13: eight requests of at most 16


def test_an_outage_still_fails_the_whole_batch_at_once():
    backend = Backend(fail=True)
    env = SearchEnvironment(backend, EpisodeConfig(top_k=1))
    eps = [Episode(prompt="P", label="x") for _ in range(5)]
    asyncio.run(env.step_batch(eps, ["<|begin_of_query|> q <|end_of_query|>"] * 5))
    assert len(backend.calls) == 1 and all(ep.search_errors == 1 for ep in eps)  # no halving on an outage
