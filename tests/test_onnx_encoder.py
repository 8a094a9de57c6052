"""The ONNX Runtime encoder: exported here from the bundled MiniLM (no hub), its vectors equal to PyTorch's for every
model profile, an index built with it ranking as one built with PyTorch, a failed check falling back with a warning,
and the export made once per model."""

from __future__ import annotations

import json
import logging
import shutil
import threading
import typing

import numpy as np
import pytest
import torch

from search_backend.serve.app import parser as serve_parser
from searchrl.search.encode import encoder as encoder_module
from searchrl.search.encode import onnx_encoder
from searchrl.search.encode.encoder import Encoder
from searchrl.search.encode.profiles import DEFAULT_MODEL, PROFILES, bundled_model_path
from searchrl.search.index.build import build
from searchrl.search.index_settings import IndexSettings
from searchrl.search.local_faiss import LocalFaissBackend
from tests.conftest import FIXTURES

QUERIES = [json.loads(line)["query"] for line in (FIXTURES / "search/kiltmini_queries.jsonl").open()]
HELD_OUT = (FIXTURES / "search/queries_1000.txt").read_text(encoding="utf-8").splitlines()[-40:]


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory, request):
    """One export cache for the module, not the user's: the tests see exports made here only."""
    path = tmp_path_factory.mktemp("onnx_cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("SEARCHRL_CACHE", str(path))
    request.addfinalizer(mp.undo)
    return path


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("profile", ["minilm", "e5", "bge"])
def test_onnx_vectors_equal_pytorch_for_every_profile(profile, cls_model):
    model = cls_model if profile == "bge" else DEFAULT_MODEL
    onnx = Encoder(model, profile=PROFILES[profile], backend="onnx")
    torch_ = Encoder(model, profile=PROFILES[profile], backend="torch")
    assert onnx.backend == "onnx" and onnx.onnx is not None and torch_.onnx is None
    # Every pass below runs outside PyTorch (tokenizer, session, NumPy pooling), so this compares that path.
    assert onnx.onnx_pooling == ("cls" if profile == "bge" else "mean")
    for texts in (QUERIES[:30], HELD_OUT[:30]):
        one_by_one = np.vstack([onnx.encode_queries([q]) for q in texts[:10]])
        want = np.vstack([torch_.encode_queries([q]) for q in texts[:10]])
        assert np.abs(one_by_one - want).max() <= 1e-5 and cosines(one_by_one, want).min() >= 0.99999
        batched, want = onnx.encode_queries(texts), torch_.encode_queries(texts)
        assert np.abs(batched - want).max() <= 1e-5 and cosines(batched, want).min() >= 0.99999
        passages, want = onnx.encode_passages(texts, batch_size=16), torch_.encode_passages(texts, batch_size=16)
        assert np.abs(passages - want).max() <= 1e-5


def test_auto_picks_onnx_on_cpu_and_the_export_is_made_once(cache):
    first = Encoder(backend="auto")
    assert first.backend == "onnx" and first.onnx_check["max_abs_diff"] <= encoder_module.ONNX_TOLERANCE
    folders = [p for p in cache.iterdir() if p.is_dir()]
    mtime = first.onnx.path.stat().st_mtime_ns
    second = Encoder(backend="auto")
    assert second.onnx.path == first.onnx.path and second.onnx.path.stat().st_mtime_ns == mtime
    assert [p for p in cache.iterdir() if p.is_dir()] == folders


def test_a_failed_check_falls_back_to_pytorch_with_the_reason(monkeypatch, caplog):
    monkeypatch.setattr(encoder_module, "ONNX_TOLERANCE", 0.0)
    with caplog.at_level(logging.WARNING, logger="searchrl.search.encode.encoder"):
        enc = Encoder(backend="onnx")
    assert enc.backend == "torch" and enc.onnx is None
    assert "differ from PyTorch's" in caplog.text and "using PyTorch" in caplog.text


def test_a_pipeline_numpy_cannot_pool_keeps_sentence_transformers_modules(tmp_path, monkeypatch):
    """Max pooling, or a tokenizer whose direct call differs from preprocess, leaves pooling to the model's own
    modules, and the vectors still equal PyTorch's."""
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(str(bundled_model_path()))
    pooling = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="max")
    SentenceTransformer(modules=[word, pooling, models.Normalize()]).save(str(tmp_path / "max"))
    onnx, torch_ = (Encoder(str(tmp_path / "max"), profile=PROFILES["minilm"], backend=b) for b in ("onnx", "torch"))
    assert onnx.backend == "onnx" and onnx.onnx_pooling is None
    assert np.abs(onnx.encode_queries(QUERIES[:8]) - torch_.encode_queries(QUERIES[:8])).max() <= 1e-5

    real = Encoder._tokenized
    monkeypatch.setattr(Encoder, "_tokenized", lambda self, texts: real(self, [t + " and more" for t in texts]))
    assert Encoder(backend="onnx").onnx_pooling is None


def test_int8_is_opt_in_and_close():
    enc = Encoder(backend="onnx-int8")
    assert enc.backend == "onnx-int8" and enc.onnx.path.name == "model.int8.onnx"
    assert enc.onnx_check["min_cosine"] >= encoder_module.INT8_MIN_COSINE and enc.onnx_check["max_abs_diff"] > 1e-5


def test_bad_backend_names_the_choices():
    with pytest.raises(ValueError, match="torch, onnx, onnx-int8"):
        Encoder(backend="tensorrt")
    assert typing.get_args(IndexSettings.model_fields["encoder_backend"].annotation) == onnx_encoder.BACKENDS
    assert serve_parser().parse_args(["--index", "x", "--encoder-backend", "torch"]).encoder_backend == "torch"
    assert serve_parser().parse_args(["--index", "x"]).encoder_backend == "auto"


@pytest.mark.slow  # 33 s of the suite; CI keeps checking the vectors per profile (test_onnx_vectors_equal_...)
def test_an_index_built_with_onnx_ranks_as_one_built_with_pytorch(tmp_path):
    # Half the fixture corpus: two encoders over all of it took 40 s of the suite's 10 minutes.
    corpus = tmp_path / "passages.jsonl"
    lines = (FIXTURES / "search/kiltmini_passages.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    corpus.write_text("".join(lines[:150]), encoding="utf-8")
    tops = {}
    for backend in ("onnx", "torch"):
        out = tmp_path / backend
        build(corpus, "jsonl", out, index_type="exact", encoder_backend=backend)
        search = LocalFaissBackend(out, encoder_backend=backend)
        assert search.encoder.backend == backend
        tops[backend] = [[p.id for p in hits] for hits in search.search_sync(QUERIES, 10)]
    assert tops["onnx"] == tops["torch"]


def test_each_thread_count_runs_a_session_of_its_own():
    """The server sizes each search's pools in the thread that runs it; a session's pool is fixed when made."""
    enc = Encoder(backend="onnx")
    want = enc.encode_queries(QUERIES[:5])
    got = {}

    def one_thread() -> None:
        torch.set_num_threads(1)
        got["vectors"] = enc.encode_queries(QUERIES[:5])

    worker = threading.Thread(target=one_thread)
    worker.start()
    worker.join()
    assert enc.onnx.sessions[1].get_session_options().intra_op_num_threads == 1
    assert set(enc.onnx.sessions) == {1, torch.get_num_threads()}
    assert np.abs(got["vectors"] - want).max() <= 1e-5


def test_a_checkpoint_stored_in_fp16_runs_fp32_on_cpu(tmp_path):
    """transformers 5 loads a checkpoint in its stored type: an fp16 one ran fp16 on CPU (slow there) and its ONNX
    export failed the check."""
    from safetensors.torch import load_file, save_file

    source = bundled_model_path()
    shutil.copytree(source, tmp_path / "model", ignore=shutil.ignore_patterns("model.safetensors"))
    weights = load_file(source / "model.safetensors")
    save_file({k: v.half().contiguous() for k, v in weights.items()}, tmp_path / "model/model.safetensors")
    enc = Encoder(str(tmp_path / "model"), profile=PROFILES["minilm"], backend="auto")
    assert next(enc.model.parameters()).dtype == torch.float32
    assert enc.backend == "onnx" and enc.onnx_check["max_abs_diff"] <= encoder_module.ONNX_TOLERANCE


def test_auto_runs_small_passes_in_onnx_and_larger_ones_in_pytorch():
    """ONNX Runtime wins on a lone query and loses from about 8 queries a pass (encoder.ONNX_MAX_ROWS)."""
    enc = Encoder(backend="auto")
    assert enc.backend == "onnx" and enc.onnx_max_rows == encoder_module.ONNX_MAX_ROWS
    session, rows = enc.onnx, []
    enc.onnx = lambda features: rows.append(len(features["input_ids"])) or session(features)
    reference = Encoder(backend="torch")
    for texts in (QUERIES[:1], QUERIES[:4], QUERIES[:16], QUERIES[:40]):
        assert np.abs(enc.encode_queries(texts) - reference.encode_queries(texts)).max() <= 1e-5
    assert rows == [1, 4]
    assert Encoder(backend="onnx").onnx_max_rows is None
