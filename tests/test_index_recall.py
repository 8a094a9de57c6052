"""An approximate index measures, when it is made, how much of the exact top-10 it keeps, and serves the cheapest
setting keeping 0.99 of it (issue 50 item 1): a compact import of 800 passages in Search-R1's layout (it kept 0.94
of its Flat file's top-10 on held-out questions before), an index that cannot reach the target made exact unless
`--accept-recall` says otherwise, and a tiny corpus's compact index the exact type."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from search_backend.serve.app import ServerConfig, create_app
from searchrl.paths import ROOT
from searchrl.search.encode.profiles import bundled_model_path
from searchrl.search.index import recall
from searchrl.search.index.build import build
from searchrl.search.index.build import main as build_main
from searchrl.search.index.faiss_import import faiss
from searchrl.search.index.importer import import_index
from searchrl.search.local_faiss import LocalFaissBackend
from tests.conftest import FIXTURES, serve
from tests.test_import_index import embed, faiss_file, search_r1_contents

KILT = FIXTURES / "search/kiltmini_passages.jsonl"


def passages(n: int, words: int = 60) -> list[dict]:
    """Real KILT passages, then the mini corpus, then fictional people: a small, mixed corpus; each text cut to its
    first `words` (encoding 800 whole passages twice took 37 s of this test's time)."""
    rows = []
    for path in (KILT, ROOT / "examples/mini_corpus.jsonl", ROOT / "examples/fictional/corpus.jsonl"):
        rows += [json.loads(line) for line in path.open(encoding="utf-8")]
    return [{**r, "text": " ".join(r["text"].split()[:words])} for r in rows[:n]]


def held_out_questions(n: int) -> list[str]:
    return [json.loads(line)["question"] for line in (ROOT / "eval/data/hotpotqa_500.jsonl").open()][:n]


def kept(got: list[list[str]], want: list[list[str]]) -> float:
    return float(np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got, want, strict=True)]))


@pytest.fixture(scope="module")
def imported_800(tmp_path_factory):
    """800 passages in wiki-18's layout with an e5-style Flat file, imported as compact."""
    work = tmp_path_factory.mktemp("import_800")
    rows = [{"id": str(i), "contents": search_r1_contents(p)} for i, p in enumerate(passages(800))]
    corpus = work / "wiki-18.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    flat = faiss_file(embed([f"passage: {r['contents']}" for r in rows], "mean", 180), "Flat", work / "e5_Flat.index")
    manifest = import_index("search-r1", corpus, flat, str(bundled_model_path()), work / "idx", profile="e5",
                            index_type="compact")  # fmt: skip
    return work / "idx", flat, manifest


def test_a_compact_import_of_800_passages_keeps_the_flat_top10_of_held_out_questions(imported_800):
    out, flat, manifest = imported_800
    found = manifest["recall"]
    assert manifest["index_type"] == "compact" and found["outcome"] == "tuned" and found["reached"]
    assert found["recall"] >= 0.99 and found["queries"] == 800 and found["query_source"] == recall.ROW_QUERIES
    assert set(manifest["search_params"]) == {"nprobe", "rerank_depth"}
    questions = held_out_questions(200)  # never seen by the tuning, which made its queries from the corpus
    _, want = faiss.read_index(flat).search(embed([f"query: {q}" for q in questions], "mean", 180), 10)
    want_ids = [[str(r) for r in row] for row in want]
    served = LocalFaissBackend(out, encoder_backend="torch")
    assert served.search_params["nprobe"] == manifest["search_params"]["nprobe"]
    got = [[p.id for p in hits] for hits in served.search_sync(questions, 10)]
    assert kept(got, want_ids) >= 0.99
    # The settings every compact index served before: 64 lists (all 20 here) and 100 re-scored.
    before = LocalFaissBackend(out, encoder_backend="torch", nprobe=64, rerank_depth=100)
    assert kept([[p.id for p in hits] for hits in before.search_sync(questions, 10)], want_ids) < 0.97


def test_the_server_reports_the_measured_recall_and_the_settings_it_serves(imported_800):
    out, _, manifest = imported_800
    config = ServerConfig(index_dir=out, token="", cache_size=0, encoder_backend="torch")
    with serve(create_app(config)) as url:
        health = httpx.get(f"{url}/health", timeout=30).json()
    assert health["recall"]["recall"] == manifest["recall"]["recall"]
    assert health["search_params"]["nprobe"] == manifest["search_params"]["nprobe"]
    assert health["search_params"]["rerank_depth"] == manifest["search_params"]["rerank_depth"]


def test_an_index_below_the_target_is_made_exact_unless_its_recall_is_accepted(tmp_path, capsys):
    """4 bytes a vector (PQ8x4) cannot keep 0.99 of the top-10: the build keeps a Flat index and says so; with
    --accept-recall the PQ index stays, its measured recall on record. Queries from a file here."""
    queries = tmp_path / "queries.jsonl"
    queries.write_text((FIXTURES / "search/kiltmini_queries.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    args = ["--corpus", str(KILT), "--format", "jsonl", "--out", str(tmp_path / "idx"), "--factory", "PQ8x4",
            "--queries", str(queries)]  # fmt: skip
    assert build_main(args) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    manifest = json.loads((tmp_path / "idx/manifest.json").read_text())
    assert manifest["factory"] == "Flat" and printed["factory"] == "Flat"
    assert manifest["recall"]["approximate"] == "PQ8x4" and manifest["recall"]["recall"] < 0.99
    assert printed["recall_outcome"].startswith("exact: no setting of PQ8x4")
    assert manifest["recall"]["queries"] == 59 and str(queries) in manifest["recall"]["query_source"]
    assert faiss.read_index(str(tmp_path / "idx/index.faiss")).ntotal == manifest["passages"]
    accepted = build(KILT, "jsonl", tmp_path / "idx", factory="PQ8x4", queries=queries, accept_recall=0.05)
    assert accepted["factory"] == "PQ8x4" and accepted["recall"]["outcome"] == "accepted (--accept-recall 0.05)"
    assert isinstance(faiss.downcast_index(faiss.read_index(str(tmp_path / "idx/index.faiss"))), faiss.IndexPQ)
    assert build_main([*args[:-2], "--accept-recall", "1.5"]) == 2
    assert "accept_recall: 1.5" in capsys.readouterr().err


def test_a_queries_file_without_queries_is_refused_with_its_line(tmp_path, capsys):
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"query": "fine"}\n{"answer": "no question"}\n', encoding="utf-8")
    args = ["--corpus", str(KILT), "--format", "jsonl", "--out", str(tmp_path / "idx"), "--index-type", "compact"]
    assert build_main([*args, "--queries", str(bad)]) == 2
    assert f"--queries {bad}:2" in capsys.readouterr().err


def test_a_tiny_corpus_compact_index_is_the_exact_type(tmp_path):
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in passages(6)), encoding="utf-8")
    manifest = build(corpus, "jsonl", tmp_path / "idx", index_type="compact")
    assert manifest["index_type"] == "exact" and manifest["factory"] is None
    assert manifest["recall"]["recall"] == 1.0 and "costs no less memory" in manifest["recall"]["outcome"]
    assert not (tmp_path / "idx/index.faiss").exists()
    assert recall.compact_is_exact(6, 384, "IVF1,PQ48x1")
    assert not recall.compact_is_exact(800, 768, "IVF20,PQ96x4")  # 1.2 MB exact against 0.16 MB compact


def test_faiss_parameter_ranges_reach_every_list():
    index = faiss.index_factory(16, "IVF40,Flat", faiss.METRIC_INNER_PRODUCT)
    assert recall.ranges(index)["nprobe"][-1] == 40 and recall.ranges(index)["nprobe"][0] == 1
    hnsw = faiss.index_factory(16, "HNSW8", faiss.METRIC_INNER_PRODUCT)
    assert min(recall.ranges(hnsw)["efSearch"]) >= recall.K and max(recall.ranges(hnsw)["efSearch"]) == 4096


def test_generated_recall_queries_are_named_so_and_are_never_a_passages_own_start():
    """Without real questions the build measures recall on queries made from its rows: the manifest says they are
    generated, and none is the start of its passage (a passage's own start sits closest to its own vector)."""
    assert recall.ROW_QUERIES.startswith("generated, not real questions")
    rows = passages(800)
    made = [recall.row_query(r["title"], r["text"]) for r in rows]
    starts = [" ".join([r["title"], *r["text"].split()[: recall.QUERY_WORDS]]).strip() for r in rows]
    long_enough = [len(r["text"].split()) > recall.QUERY_WORDS for r in rows]
    assert sum(long_enough) > 700
    assert not [q for q, s, ok in zip(made, starts, long_enough, strict=True) if ok and q == s]
