"""The environment step, the recorded-action splitter and the reward client, on literal inputs."""

import asyncio

import pytest

from reward_server.app import ServerSettings, create_app
from reward_server.spec import STAGE2_ANSWER
from search_backend.base import Passage, SearchError
from searchrl.process import free_port
from searchrl.rollout.engines import recorded_actions
from searchrl.rollout.environment import Episode, SearchEnvironment
from searchrl.rollout.reward_client import RewardClient, RewardServerError
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
    from reward_server.scoring import score_solution
    from reward_server.spec import STAGE2_ANSWER

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
