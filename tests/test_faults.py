"""Servers killed and restarted under a running job: episodes finish, failures are counted, rewards
come back unchanged, and nothing waits past its deadline."""

import asyncio

import pytest

from eval.generation import Completion, GenParams, run_episodes
from rollout.config import EpisodeConfig
from rollout.environment import SearchEnvironment
from rollout.reward_client import RewardClient, RewardServerError
from rollout.service import free_port, start_module, stop
from search_backend.http_client import HttpSearchBackend

ANSWER = "done </think><answer> x </answer>"


class KillingEngine:
    """Each turn asks every episode for a search; before turn 2 the retrieval server is killed and
    before turn 3 it is started again on the same port."""

    def __init__(self, kill, restart):
        self.turn = 0
        self.kill, self.restart = kill, restart

    async def generate_batch(self, prompts, params):
        self.turn += 1
        if self.turn == 2:
            self.kill()
        if self.turn == 3:
            await asyncio.to_thread(self.restart)
        text = ANSWER if self.turn > 3 else f"<|begin_of_query|> capital city number {self.turn} <|end_of_query|>"
        return [Completion(text, "stop") for _ in prompts]


def test_retrieval_server_killed_and_restarted_mid_batch(mini_index, tmp_path):
    port = free_port()
    args = ["--index", str(mini_index), "--threads", "1"]
    procs = [start_module("search_backend.serve", args, port, tmp_path / "search.log", 180)]

    def kill():
        procs[-1].kill()
        procs[-1].wait()

    def restart():
        procs.append(start_module("search_backend.serve", args, port, tmp_path / "search.log", 180))

    async def run():
        backend = HttpSearchBackend(f"http://127.0.0.1:{port}", timeout_s=5, retries=1, backoff_s=0.1)
        env = SearchEnvironment(backend, EpisodeConfig(top_k=2, max_searches=8))
        try:
            return await asyncio.wait_for(
                run_episodes(KillingEngine(kill, restart), env, [f"P{i}" for i in range(12)], ["x"] * 12, GenParams()),
                timeout=240,
            )
        finally:
            await backend.aclose()

    try:
        results = asyncio.run(run())
    finally:
        for p in procs:
            stop(p)
    assert len(results) == 12 and all(r.episode.solution.endswith("</answer>") for r in results)
    for r in results:
        ep = r.episode
        assert ep.num_searches == 3 and ep.search_errors == 1  # turn 2 hit the dead server, turns 1 and 3 did not
        blocks = ep.solution.split("<|begin_of_documents|>\n(1)")[1:]
        assert "The search failed" in blocks[1] and "The search failed" not in blocks[0] + blocks[2]


def test_reward_server_killed_and_restarted(tmp_path):
    port = free_port()
    args = ["--preset", "r1searcher-qwen-stage2"]
    text = "x </think><answer> Paris </answer>"

    async def run():
        client = RewardClient(f"http://127.0.0.1:{port}", deadline_s=120)
        proc = start_module("reward_server", args, port, tmp_path / "reward.log")
        try:
            before = await client.score(text, "", "Paris")
            proc.kill()
            proc.wait()
            pending = asyncio.create_task(client.score(text, "", "Paris"))
            await asyncio.sleep(1.0)
            assert not pending.done()  # still retrying, not answered with a made-up reward
            proc = await asyncio.to_thread(start_module, "reward_server", args, port, tmp_path / "reward.log")
            after = await pending
            return before, after
        finally:
            stop(proc)
            await client.aclose()

    before, after = asyncio.run(run())
    assert before == after and before.reward == 1.0


def test_reward_server_gone_for_good_fails_within_the_deadline():
    async def run():
        client = RewardClient(f"http://127.0.0.1:{free_port()}", deadline_s=2)
        try:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(RewardServerError, match="made-up rewards"):
                await client.score("x", "", "y")
            return loop.time() - t0
        finally:
            await client.aclose()

    assert asyncio.run(run()) < 10


def test_build_crashing_while_writing_the_index_is_never_loaded_and_resumes(tmp_path, monkeypatch):
    import shutil

    import search_backend.faiss_index as faiss_index
    from search_backend.build_index import build
    from search_backend.local_faiss import IndexValidationError, LocalFaissBackend
    from tests.test_search_fixtures import build_kwargs, fixture_index

    reference = fixture_index()
    out = tmp_path / "index"
    shutil.copytree(reference, out, ignore=shutil.ignore_patterns("index.faiss", "manifest.json"))
    real_write = faiss_index.faiss.write_index

    def crash_midway(index, path):
        real_write(index, path)
        with open(path, "r+b") as fh:  # what a kill during the write leaves: a cut-off file
            fh.truncate(1000)
        raise KeyboardInterrupt("killed while writing the index")

    monkeypatch.setattr(faiss_index.faiss, "write_index", crash_midway)
    with pytest.raises(KeyboardInterrupt):
        build(out=out, **build_kwargs())
    assert not (out / "manifest.json").exists() and not (out / "index.faiss").exists()
    with pytest.raises(IndexValidationError):
        LocalFaissBackend(out)  # a half-written index is never loaded
    monkeypatch.setattr(faiss_index.faiss, "write_index", real_write)
    build(out=out, **build_kwargs())
    assert (out / "index.faiss").read_bytes() == (reference / "index.faiss").read_bytes()
    assert LocalFaissBackend(out).search_sync(["Fort Hood shooting"], 3)
