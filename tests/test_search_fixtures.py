"""Shared helpers for the search tests (imported by the other test_search_* modules), and checks on the fixtures.

The fixture index is built once per test run and cached here, because pytest would build a session fixture once
per module that imports it.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FIXTURES = Path(__file__).parent / "fixtures" / "search"
PASSAGES = FIXTURES / "kiltmini_passages.jsonl"
QUERIES = FIXTURES / "kiltmini_queries.jsonl"
QUERIES_1000 = FIXTURES / "queries_1000.txt"
KILT_SAMPLE = FIXTURES / "kilt_sample.jsonl"
SHARD_SIZE = 100


def scratch_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


def build_kwargs() -> dict:
    return {"corpus": PASSAGES, "fmt": "jsonl", "factory": "Flat", "shard_size": SHARD_SIZE, "batch_size": 32}


@functools.cache
def fixture_index() -> Path:
    """The kiltmini-slice index (Flat, MiniLM), built once per test run (tests.conftest.shared_index)."""
    from searchrl.search.index.build import build
    from tests.conftest import shared_index

    return shared_index("fixture_index", lambda out: build(out=out, **build_kwargs()))


@functools.cache
def fixture_backend():
    from searchrl.search.local_faiss import LocalFaissBackend

    return LocalFaissBackend(fixture_index())


def fixture_queries() -> list[dict]:
    return [json.loads(line) for line in QUERIES.read_text(encoding="utf-8").splitlines()]


def test_fixture_targets_are_in_the_slice():
    ids = {json.loads(line)["id"] for line in PASSAGES.read_text(encoding="utf-8").splitlines()}
    queries = fixture_queries()
    assert len(queries) >= 50
    assert all(set(q["ranked_ids"]) <= ids for q in queries)


def test_fixtures_carry_attribution():
    first = (FIXTURES / "ATTRIBUTION.txt").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# Data: RUCAIBox/R1-Searcher (MIT); Wikipedia text CC BY-SA via KILT."
