"""`searchrl index import`: Search-R1's and R1-Searcher's index files, built here the way their own builders build
them (transformers, their pooling and prefixes, a FAISS index of inner products; the bundled MiniLM standing in for
e5 and bge), served without re-encoding, with the answers a direct FAISS search of the original file gives; and the
wrong model, shifted rows and a short corpus refused with what was found."""

from __future__ import annotations

import json
import os

import httpx
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from launch.cli import main as cli_main
from search_backend.serve.app import ServerConfig, create_app
from searchrl.search.encode.profiles import bundled_model_path
from searchrl.search.index.faiss_import import faiss
from searchrl.search.index.importer import IndexImportError, import_index
from searchrl.search.index.importer import main as import_main
from searchrl.search.local_faiss import LocalFaissBackend
from tests.conftest import FIXTURES, serve

PASSAGES = [json.loads(line) for line in (FIXTURES / "search/kiltmini_passages.jsonl").open(encoding="utf-8")][:160]
QUERIES = [json.loads(line)["query"] for line in (FIXTURES / "search/kiltmini_queries.jsonl").open()][:24]
BGE_INSTRUCTION = "Represent this sentence for searching relevant passages:"  # FlagModel's, joined with no space


def embed(texts: list[str], pooling: str, max_length: int) -> np.ndarray:
    """As Search-R1's index_builder.py and FlagEmbedding encode: tokenizer, AutoModel, pooling, L2 normalisation."""
    path = bundled_model_path()
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    out = []
    with torch.no_grad():
        for lo in range(0, len(texts), 64):
            inputs = tokenizer(texts[lo : lo + 64], max_length=max_length, padding=True, truncation=True,
                               return_tensors="pt")  # fmt: skip
            hidden = model(**inputs).last_hidden_state
            if pooling == "mean":
                mask = inputs["attention_mask"][..., None]
                vectors = (hidden * mask).sum(1) / mask.sum(1)
            else:
                vectors = hidden[:, 0]
            out.append(torch.nn.functional.normalize(vectors, dim=-1).numpy())
    return np.ascontiguousarray(np.vstack(out), dtype=np.float32)


def faiss_file(vectors: np.ndarray, factory: str, path) -> str:
    index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    index.add(vectors)
    faiss.write_index(index, str(path))
    return str(path)


def search_r1_contents(p: dict) -> str:
    return f'"{p["title"]}"\n{p["text"]}'


@pytest.fixture(scope="module")
def search_r1(tmp_path_factory):
    """wiki-18.jsonl's layout and e5's encoding (`passage: ` + contents, mean pooling, max_length 180)."""
    work = tmp_path_factory.mktemp("search_r1")
    rows = [{"id": str(i), "contents": search_r1_contents(p)} for i, p in enumerate(PASSAGES)]
    corpus = work / "wiki-18.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    vectors = embed([f"passage: {r['contents']}" for r in rows], "mean", 180)
    files = {f: faiss_file(vectors, f, work / f"e5_{f}.index") for f in ("Flat", "HNSW64")}
    return corpus, files, rows


@pytest.fixture(scope="module")
def r1_searcher(tmp_path_factory):
    """split_kilt_to_100.py's TSV (`row<TAB>Title   text`) and FlagModel's corpus encoding (CLS, no instruction)."""
    work = tmp_path_factory.mktemp("r1_searcher")
    lines = [f"{i}\t{p['title']}   {p['text']}" for i, p in enumerate(PASSAGES)]
    corpus = work / "wiki_kilt_100_really.tsv"
    corpus.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    vectors = embed([line.split("\t")[1] for line in lines], "cls", 300)
    return corpus, faiss_file(vectors, "Flat", work / "enwiki_kilt_all.bin"), lines


def direct(path: str, query_texts: list[str], pooling: str, max_length: int, k: int = 5):
    scores, rows = faiss.read_index(path).search(embed(query_texts, pooling, max_length), k)
    return scores, rows


@pytest.mark.parametrize("factory", ["Flat", "HNSW64"])
def test_search_r1_index_is_served_as_the_original_file_answers(factory, search_r1, tmp_path):
    corpus, files, rows = search_r1
    manifest = import_index("search-r1", corpus, files[factory], str(bundled_model_path()), tmp_path / "idx",
                            profile="e5")  # fmt: skip
    assert manifest["passages"] == len(rows) and manifest["imported"]["row_check"]["min_cosine"] > 0.999
    assert (tmp_path / "idx/index.faiss").stat().st_ino == os.stat(files[factory]).st_ino
    backend = LocalFaissBackend(tmp_path / "idx", encoder_backend="torch")
    got = backend.search_sync(QUERIES, 5)
    scores, want = direct(files[factory], [f"query: {q}" for q in QUERIES], "mean", 180)
    assert [[p.id for p in hits] for hits in got] == [[rows[r]["id"] for r in row] for row in want]
    np.testing.assert_allclose([[p.score for p in hits] for hits in got], scores, atol=1e-5)
    assert got[0][0].title == PASSAGES[want[0][0]]["title"] and got[0][0].text == PASSAGES[want[0][0]]["text"]


def test_every_endpoint_serves_the_imported_index(search_r1, tmp_path):
    corpus, files, rows = search_r1
    import_index("search-r1", corpus, files["Flat"], str(bundled_model_path()), tmp_path / "idx", profile="e5")
    _, want = direct(files["Flat"], [f"query: {q}" for q in QUERIES[:3]], "mean", 180, k=3)
    config = ServerConfig(index_dir=tmp_path / "idx", token="", cache_size=0, encoder_backend="torch")
    with serve(create_app(config)) as url:
        search = httpx.post(f"{url}/search", json={"queries": QUERIES[:3], "top_k": 3}, timeout=60).json()
        retrieve = httpx.post(f"{url}/retrieve", json={"queries": QUERIES[:3], "topk": 3}, timeout=60).json()
        queries = httpx.post(f"{url}/queries", json={"queries": QUERIES[:3], "k": 3}, timeout=60).json()
    assert [[h["id"] for h in hits] for hits in search["results"]] == [[rows[r]["id"] for r in w] for w in want]
    assert [[d["contents"] for d in docs] for docs in retrieve["result"]] == [
        [rows[r]["contents"] for r in w] for w in want
    ]
    assert len(queries["answers"]) == 3 and all(len(a) == 3 for a in queries["answers"])


def test_r1_searcher_index_is_served_as_the_original_file_answers(r1_searcher, cls_model, tmp_path):
    corpus, path, lines = r1_searcher
    manifest = import_index("r1-searcher", corpus, path, cls_model, tmp_path / "idx", profile="bge")
    assert manifest["imported"]["row_check"]["min_cosine"] > 0.999
    backend = LocalFaissBackend(tmp_path / "idx", encoder_backend="torch")
    got = backend.search_sync(QUERIES, 5)
    scores, want = direct(path, [f"{BGE_INSTRUCTION}{q}" for q in QUERIES], "cls", 512)
    assert [[p.id for p in hits] for hits in got] == [[str(r) for r in row] for row in want]
    np.testing.assert_allclose([[p.score for p in hits] for hits in got], scores, atol=1e-5)
    assert got[0][0].title == PASSAGES[want[0][0]]["title"]


def test_another_pooling_is_refused(search_r1, cls_model, tmp_path):
    corpus, files, _ = search_r1
    with pytest.raises(IndexImportError, match="another model, pooling or passage prefix"):
        import_index("search-r1", corpus, files["Flat"], cls_model, tmp_path / "idx", profile="e5")
    assert not (tmp_path / "idx/manifest.json").exists()


def test_rows_out_of_step_are_refused_as_a_shift(search_r1, tmp_path):
    corpus, files, rows = search_r1
    shifted = tmp_path / "shifted.jsonl"
    shifted.write_text("".join(json.dumps(r) + "\n" for r in rows[1:] + rows[:1]), encoding="utf-8")
    with pytest.raises(IndexImportError, match=r"out of step: passage row r matches stored vector r\+1"):
        import_index("search-r1", shifted, files["Flat"], str(bundled_model_path()), tmp_path / "idx", profile="e5")


def test_a_corpus_of_another_length_and_bad_arguments_are_refused(search_r1, tmp_path, capsys):
    corpus, files, rows = search_r1
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]), encoding="utf-8")
    with pytest.raises(IndexImportError, match=f"holds {len(rows) - 1} passages but .* {len(rows)} vectors"):
        import_index("search-r1", short, files["Flat"], str(bundled_model_path()), tmp_path / "idx", profile="e5")
    args = ["--layout", "search-r1", "--corpus", str(tmp_path / "none.jsonl"), "--faiss", files["Flat"]]
    assert import_main([*args, "--model", str(bundled_model_path()), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--corpus" in err and "no such file" in err
    with pytest.raises(SystemExit):
        cli_main(["index", "import", "--help"])
    assert "--layout" in capsys.readouterr().out


@pytest.mark.parametrize("index_type", ["compact", "exact"])
def test_an_import_can_be_rebuilt_as_our_index_types_from_the_stored_vectors(index_type, search_r1, tmp_path):
    """Nothing is encoded: the vectors come out of the FAISS file into fp16 shards, a shard at a time."""
    corpus, files, rows = search_r1
    manifest = import_index("search-r1", corpus, files["Flat"], str(bundled_model_path()), tmp_path / "idx",
                            profile="e5", index_type=index_type, shard_size=64)  # fmt: skip
    assert manifest["index_type"] == index_type and manifest["files"]["shards"] == 3
    assert not os.path.exists(tmp_path / "idx/index.faiss") or os.stat(tmp_path / "idx/index.faiss").st_ino != (
        os.stat(files["Flat"]).st_ino
    )
    backend = LocalFaissBackend(tmp_path / "idx", encoder_backend="torch")
    got = backend.search_sync(QUERIES, 10)
    scores, want = direct(files["Flat"], [f"query: {q}" for q in QUERIES], "mean", 180, k=10)
    ids = [[rows[r]["id"] for r in row] for row in want]
    overlap = np.mean([len({p.id for p in hits} & set(w)) / 10 for hits, w in zip(got, ids, strict=True)])
    assert overlap >= 0.99
    # Scores come from the fp16 shards: equal to the Flat file's to fp16 precision.
    np.testing.assert_allclose([hits[0].score for hits in got], scores[:, 0], atol=2e-3)
