"""The query encoder's direct path (the model's modules, no `encode`) gives what `encode` gives, and steps aside
for models where `encode` would add something."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests.conftest import FIXTURES

QUERIES = (FIXTURES / "search/queries_1000.txt").read_text(encoding="utf-8").splitlines()


@functools.cache
def encoder():
    from search_backend.encoder import Encoder

    return Encoder()


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
