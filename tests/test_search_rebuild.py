"""Rebuilding into an existing index directory, and encoding split across (faked) devices.

Corpora here are 40-passage slices of the search fixture, so each encode takes about a second.
"""

from __future__ import annotations

import functools
import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

import searchrl.search.index.build as build_index
from searchrl.search.index.build import BuildError, build, resolve_devices
from searchrl.search.index.layout import IndexValidationError, read_json, write_json_atomic
from searchrl.search.local_faiss import LocalFaissBackend
from tests.test_search_fixtures import PASSAGES, fixture_queries, scratch_dir

N = 40
SHARD = 12


@functools.cache
def corpora() -> tuple:
    """(forward, reversed) corpus files holding the same 40 passages, and queries whose targets are in them."""
    folder = scratch_dir("searchrl-rebuild-")
    lines = PASSAGES.read_text(encoding="utf-8").splitlines()[:N]
    forward, backward = folder / "forward.jsonl", folder / "reversed.jsonl"
    forward.write_text("\n".join(lines) + "\n", encoding="utf-8")
    backward.write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    ids = {json.loads(line)["id"] for line in lines}
    queries = [q["query"] for q in fixture_queries() if q["ranked_ids"][0] in ids]
    return forward, backward, queries


def kwargs(**extra) -> dict:
    return {"fmt": "jsonl", "shard_size": SHARD, "batch_size": 16, **extra}


@functools.cache
def clean_build(which: int) -> object:
    out = scratch_dir("searchrl-clean-") / "index"
    build(corpora()[which], out=out, **kwargs())
    return out


@functools.cache
def encoder():
    from searchrl.search.encode.encoder import Encoder

    return Encoder()


def answers(index_dir) -> list[list[tuple[str, float]]]:
    backend = LocalFaissBackend(index_dir, encoder=encoder())
    return [[(p.id, round(p.score, 5)) for p in hits] for hits in backend.search_sync(corpora()[2], 5)]


def test_rebuild_with_a_reordered_corpus_gives_the_clean_build(tmp_path):
    out = tmp_path / "index"
    shutil.copytree(clean_build(0), out)
    build(corpora()[1], out=out, **kwargs())
    clean = clean_build(1)
    for shard in sorted((clean / "embeddings").glob("shard_*.npy")):
        assert (out / "embeddings" / shard.name).read_bytes() == shard.read_bytes()
    assert (out / "index.faiss").read_bytes() == (clean / "index.faiss").read_bytes()
    assert answers(out) == answers(clean)
    assert answers(out) != [] and len(corpora()[2]) >= 5


def test_rebuild_killed_after_the_new_store_is_refused_at_load(tmp_path, monkeypatch):
    out = tmp_path / "index"
    shutil.copytree(clean_build(0), out)
    old_manifest = (out / "manifest.json").read_text()

    def killed(*args, **kw):
        raise KeyboardInterrupt("killed after the store landed")

    monkeypatch.setattr(build_index, "encode_shards", killed)
    with pytest.raises(KeyboardInterrupt):
        build(corpora()[1], out=out, **kwargs())
    assert (
        json.loads((out / "store.json").read_text())["corpus_sha256"] != json.loads(old_manifest)["corpus"]["sha256"]
    )
    with pytest.raises(IndexValidationError, match="manifest.json"):
        LocalFaissBackend(out, encoder=encoder())
    # Even the old manifest put back (a build that never removed it) is refused: the store names another corpus.
    (out / "manifest.json").write_text(old_manifest)
    with pytest.raises(IndexValidationError, match="store.json"):
        LocalFaissBackend(out, encoder=encoder())
    monkeypatch.undo()
    build(corpora()[1], out=out, **kwargs())
    assert answers(out) == answers(clean_build(1))


def test_shards_without_a_record_are_never_reused(tmp_path):
    out = tmp_path / "index"
    shutil.copytree(clean_build(0), out)
    # What an interrupted clean-up of another corpus's shards could leave: shards, but no record of them.
    (out / "embeddings.json").unlink()
    shard = out / "embeddings" / "shard_00000.npy"
    np.save(shard, np.zeros_like(np.load(shard)))
    build(corpora()[0], out=out, **kwargs())
    assert shard.read_bytes() == (clean_build(0) / "embeddings" / "shard_00000.npy").read_bytes()


def test_encoding_on_two_faked_devices_matches_one_and_resumes(tmp_path):
    out = tmp_path / "index"
    shutil.copytree(
        clean_build(0),
        out,
        ignore=shutil.ignore_patterns("manifest.json", "shard_00001.npy", "shard_00003.npy", "index.*"),
    )
    kept = out / "embeddings" / "shard_00000.npy"
    before = kept.stat().st_mtime_ns
    manifest = build(corpora()[0], out=out, **kwargs(device="cpu,cpu"))
    assert manifest["build"]["device"] == "cpu,cpu" and manifest["build"]["encoded_passages"] == SHARD + N - 3 * SHARD
    assert kept.stat().st_mtime_ns == before
    clean = clean_build(0)
    for shard in sorted((clean / "embeddings").glob("shard_*.npy")):
        got, want = np.load(out / "embeddings" / shard.name), np.load(shard)
        assert got.dtype == np.float16 and np.allclose(got, want, atol=2e-3)
    assert [[i for i, _ in hits] for hits in answers(out)] == [[i for i, _ in hits] for hits in answers(clean)]


def test_length_sorted_encoding_matches_sentence_transformers():
    texts = [json.loads(line)["text"] for line in PASSAGES.read_text(encoding="utf-8").splitlines()[:24]]
    texts += ["short", "two words"]
    got = encoder().encode_passages_sorted(texts, batch_size=8)
    want = encoder().model.encode(texts, batch_size=8, normalize_embeddings=True)
    assert got.dtype == np.float16 and np.allclose(got, want, atol=1e-3)
    assert encoder().token_lengths(["a b", "a b c d e f"]).tolist()[0] < encoder().token_lengths(["a b c d e f"])[0]


def test_device_lists():
    assert resolve_devices("cpu") == ["cpu"]
    assert resolve_devices("cpu,cpu") == ["cpu", "cpu"]
    assert resolve_devices("cuda:0, cuda:3") == ["cuda:0", "cuda:3"]
    for bad in ("gpu", "cuda:x", "", "cuda,cuda:1"):
        with pytest.raises(BuildError, match="device"):
            resolve_devices(bad)


@functools.cache
def other_corpus() -> tuple[object, set[str]]:
    """40 passages none of which is in corpora()'s: a rebuild with them changes every answer."""
    lines = PASSAGES.read_text(encoding="utf-8").splitlines()[N : 2 * N]
    path = scratch_dir("searchrl-other-") / "other.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, {json.loads(line)["id"] for line in lines}


def served_ids(url: str) -> set[str]:
    response = httpx.post(f"{url}/search", json={"queries": ["film director", "football club"], "top_k": 3})
    return {p["id"] for hits in response.json()["results"] for p in hits}


# Issue 23 item 6: an index rebuilt under a running server was served from the old corpus while /health named it.
def test_a_rebuild_under_the_running_server_shows_on_health_and_reloads_without_a_restart(tmp_path):
    from search_backend.serve.app import ServerConfig, create_app
    from tests.conftest import serve

    out = tmp_path / "index"
    shutil.copytree(clean_build(0), out)
    first_ids = {json.loads(line)["id"] for line in corpora()[0].read_text(encoding="utf-8").splitlines()}
    corpus, second_ids = other_corpus()
    with serve(create_app(ServerConfig(index_dir=out, cache_size=100))) as url:
        assert served_ids(url) <= first_ids
        health = httpx.get(f"{url}/health").json()
        assert health["index_on_disk"] == {"state": "loaded"}
        old_version = health["index_version"]
        reload = httpx.post(f"{url}/admin/reload", json={})
        assert reload.status_code == 200 and reload.json()["reloaded"] is False  # nothing new on disk

        build(corpus, out=out, **kwargs())  # the real builder, into the directory being served
        on_disk = httpx.get(f"{url}/health").json()["index_on_disk"]
        assert on_disk["state"] == "changed" and "POST /admin/reload" in on_disk["detail"]
        assert on_disk["on_disk"]["corpus_sha256"] != on_disk["loaded"]["corpus_sha256"]
        assert served_ids(url) <= first_ids  # still the old index (and its cached answers) until the reload

        reload = httpx.post(f"{url}/admin/reload", json={})
        assert reload.status_code == 200 and reload.json()["reloaded"] is True
        assert reload.json()["previous_version"] == old_version
        assert served_ids(url) <= second_ids
        health = httpx.get(f"{url}/health").json()
        assert health["index_on_disk"] == {"state": "loaded"} and health["index_version"] != old_version

        # A build under way (no manifest yet): /health says so, a reload is refused and the index stays served.
        (out / "manifest.json").rename(tmp_path / "manifest.json")
        assert httpx.get(f"{url}/health").json()["index_on_disk"]["state"] == "unfinished"
        refused = httpx.post(f"{url}/admin/reload", json={})
        assert refused.status_code == 409 and refused.json()["field"] == "index_dir"
        assert served_ids(url) <= second_ids


def test_sighup_reloads_a_rebuilt_index(tmp_path):
    import os
    import signal
    import time

    from searchrl.process import free_port, start_module, stop

    out = tmp_path / "index"
    shutil.copytree(clean_build(0), out)
    corpus, second_ids = other_corpus()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_module("search_backend.serve", ["--index", str(out), "--threads", "1"], port, tmp_path / "log", 180)
    try:
        build(corpus, out=out, **kwargs())
        assert httpx.get(f"{url}/health").json()["index_on_disk"]["state"] == "changed"
        os.kill(proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 120
        while httpx.get(f"{url}/health").json()["index_on_disk"]["state"] != "loaded":
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        assert served_ids(url) <= second_ids
    finally:
        stop(proc)


def test_records_written_at_once_by_many_writers_all_land(tmp_path):
    """Two jobs that reuse one finished index (the rehearsals' shared one) rewrite its records at the same time:
    every writer must succeed and the record must stay valid JSON."""
    path = tmp_path / "manifest.json"

    def write(i: int) -> None:
        for j in range(100):
            write_json_atomic(path, {"writer": i, "round": j, "pad": "x" * 2000})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(8)))  # re-raises a writer's error
    assert read_json(path)["round"] == 99
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temporary file left behind
