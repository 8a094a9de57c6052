"""The query encoder's direct path (the model's modules, no `encode`) gives what `encode` gives, and steps aside
for models where `encode` would add something. PyTorch's path: ONNX Runtime's agreement with it is tested in
tests/test_onnx_encoder.py."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from tests.conftest import FIXTURES

QUERIES = (FIXTURES / "search/queries_1000.txt").read_text(encoding="utf-8").splitlines()


@functools.cache
def encoder():
    from searchrl.search.encode.encoder import Encoder

    return Encoder(backend="torch")


def through_encode(texts: list[str], **options) -> np.ndarray:
    model = encoder().model
    vectors = model.encode(texts, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False, **options)
    return np.asarray(vectors, dtype=np.float32)


@pytest.mark.parametrize("batch", [QUERIES[:1], QUERIES[5:12], QUERIES[100:164]], ids=["1", "7", "64"])
def test_direct_path_gives_what_encode_gives(batch, monkeypatch):
    enc = encoder()
    assert enc.direct
    expected = through_encode(batch)
    # The direct path must not fall back to `encode` for a server-sized batch.
    monkeypatch.setattr(enc.model, "encode", lambda *a, **k: pytest.fail("encode called"))
    vectors = enc.encode_queries(batch)
    assert vectors.dtype == np.float32 and vectors.flags.c_contiguous and vectors.shape == (len(batch), enc.dimension)
    np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_more_queries_than_one_batch_go_through_encode(monkeypatch):
    enc = encoder()
    calls = []
    original = enc.model.encode
    monkeypatch.setattr(enc.model, "encode", lambda texts, **k: calls.append(len(texts)) or original(texts, **k))
    vectors = enc.encode_queries(QUERIES[:10], batch_size=4)
    assert calls == [10]
    np.testing.assert_allclose(vectors, through_encode(QUERIES[:10]), rtol=0, atol=1e-6)


def test_a_model_whose_encode_adds_a_prompt_is_not_encoded_directly(monkeypatch):
    enc = encoder()
    monkeypatch.setattr(enc.model, "prompts", {"query": "query: "})
    monkeypatch.setattr(enc.model, "default_prompt_name", "query")
    assert not enc._plain_text_pipeline()
    monkeypatch.setattr(enc, "direct", enc._plain_text_pipeline())
    vectors = enc.encode_queries(QUERIES[:3])
    np.testing.assert_allclose(vectors, through_encode(QUERIES[:3]), rtol=0, atol=1e-6)
    # ... and the prompt did change the vectors, so the comparison above is not vacuous.
    monkeypatch.setattr(enc.model, "default_prompt_name", None)
    assert np.abs(vectors - through_encode(QUERIES[:3])).max() > 1e-3


def recorded_chunks(enc, monkeypatch) -> list[list[str]]:
    chunks: list[list[str]] = []
    original = enc._forward
    monkeypatch.setattr(enc, "_forward", lambda texts: chunks.append(texts) or original(texts))
    return chunks


@pytest.mark.parametrize(("size", "expected"), [(16, [16]), (17, [9, 8]), (40, [14, 13, 13]), (64, [16] * 4)])
def test_a_batch_runs_shortest_first_in_near_equal_chunks(size, expected, monkeypatch):
    enc = encoder()
    assert enc.forward_batch == 16  # the CPU default
    # Lengths from 1 to ~200 characters in no order, so a chunking that ignored length would mix them.
    batch = [QUERIES[i] + " x" * (i * 37 % size) for i in range(300, 300 + size)]
    chunks = recorded_chunks(enc, monkeypatch)
    vectors = enc.encode_queries(batch)
    assert [len(c) for c in chunks] == expected
    # Every query of a chunk is at most as long as every query of the next one.
    for shorter, longer in itertools.pairwise(chunks):
        assert max(map(len, shorter)) <= min(map(len, longer))
    # Each vector is its own query's, in input order, as `encode` gives it.
    np.testing.assert_allclose(vectors, through_encode(batch), rtol=0, atol=1e-6)


def test_forward_batch_is_a_setting_of_the_index_and_the_server(monkeypatch):
    import uvicorn

    from search_backend.serve import app as serve_module
    from searchrl.search.backends import SearchConfig
    from searchrl.search.local_faiss import LocalFaissBackend
    from tests.test_search_fixtures import fixture_index

    enc = encoder()
    monkeypatch.setattr(enc, "forward_batch", 64)
    chunks = recorded_chunks(enc, monkeypatch)
    enc.encode_queries(QUERIES[:40])
    assert [len(c) for c in chunks] == [40]

    backend = LocalFaissBackend.from_config(SearchConfig(index_dir=fixture_index(), forward_batch=8))
    assert backend.encoder.forward_batch == 8
    configs: list = []
    monkeypatch.setattr(serve_module, "create_app", lambda config: configs.append(config))
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    serve_module.main(["--index", "unused"])
    serve_module.main(["--index", "unused", "--forward-batch", "64"])
    assert [c.forward_batch for c in configs] == [None, 64]
    with pytest.raises(ValueError, match="forward_batch"):
        SearchConfig(forward_batch=0)


def test_the_unused_pooler_is_dropped_and_the_vectors_stay_those_of_the_untouched_model():
    from sentence_transformers import SentenceTransformer

    from searchrl.search.encode.profiles import resolve_model

    enc = encoder()
    assert enc.pooler_dropped and enc.model[0].auto_model.pooler is None
    untouched = SentenceTransformer(resolve_model(enc.model_name), device="cpu")
    assert untouched[0].auto_model.pooler is not None
    batch = QUERIES[200:240]
    expected = untouched.encode(batch, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    np.testing.assert_allclose(enc.encode_queries(batch), expected, rtol=0, atol=1e-6)


def test_a_pooler_that_changes_the_vectors_is_kept(monkeypatch):
    from searchrl.search.encode.encoder import Encoder

    # A model whose output reads its pooler: the probe differs without it, so it stays.
    real = Encoder._forward
    monkeypatch.setattr(
        Encoder, "_forward", lambda self, texts: real(self, texts) + (self.model[0].auto_model.pooler is None)
    )
    enc = Encoder()
    assert not enc.pooler_dropped and enc.model[0].auto_model.pooler is not None
