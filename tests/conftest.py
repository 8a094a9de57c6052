"""Shared test helpers: real uvicorn servers on loopback, fixture paths."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from searchrl.paths import ROOT
from searchrl.search.encode.profiles import bundled_model_path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FIXTURES = Path(__file__).parent / "fixtures"


@contextmanager
def serve(app, port: int | None = None, **uvicorn_options) -> Iterator[str]:
    """Run an ASGI app with uvicorn in a background thread; yields its base URL. `uvicorn_options` go to
    uvicorn.Config (e.g. `timeout_keep_alive=1`, so idle connections go stale within a test)."""
    from searchrl.process import free_port

    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **uvicorn_options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    # A search app's start-up loads the encoder and, on a fresh clone, exports it to ONNX once: 30 s was not enough
    # on 2 loaded cores (CI, 2026-11-28). Waiting longer costs nothing when the app starts quickly.
    deadline = time.monotonic() + 180
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def shared_index(name: str, make: Callable[[Path], object]) -> Path:
    """An index built once per test run and read by every pytest-xdist worker (each encoded both fixture corpora on
    its own: about a minute of the suite's 10 minutes): the first worker to ask builds it under a file lock, the
    others wait and read it; a build cut off is built again (the manifest is written last). Outside xdist, a
    folder of this process. Tests that change an index copy it first."""
    from filelock import FileLock

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        folder = Path(tempfile.mkdtemp(prefix=f"searchrl-{name}-"))
        atexit.register(shutil.rmtree, folder, True)
        make(folder / "index")
        return folder / "index"
    shared = Path(tempfile.gettempdir()) / f"searchrl-tests-{run}"
    shared.mkdir(exist_ok=True)
    out = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not (out / "manifest.json").is_file():
            shutil.rmtree(out, ignore_errors=True)
            make(out)
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    # Shared indexes of runs a day old or more: the workers of a run cannot tell which of them finishes last.
    if not hasattr(session.config, "workerinput"):
        for old in Path(tempfile.gettempdir()).glob("searchrl-tests-*"):
            if time.time() - old.stat().st_mtime > 86_400:
                shutil.rmtree(old, ignore_errors=True)


@pytest.fixture(scope="session")
def cls_model(tmp_path_factory) -> str:
    """MiniLM's transformer under CLS pooling, as bge pools: a model folder made here (a stand-in for bge)."""
    from sentence_transformers import SentenceTransformer, models

    out = tmp_path_factory.mktemp("minilm_cls")
    word = models.Transformer(str(bundled_model_path()))
    pooling = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="cls")
    SentenceTransformer(modules=[word, pooling, models.Normalize()]).save(str(out))
    return str(out)


@pytest.fixture(scope="session")
def mini_index(tmp_path_factory) -> Path:
    """The quickstart's index over the bundled mini corpus, built once per test run."""
    from searchrl.search.index.build import build

    return shared_index("mini_index", lambda out: build(ROOT / "examples/mini_corpus.jsonl", "jsonl", out))


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory):
    """Router-R1's chat model config (Qwen2.5-3B-Instruct) with a ChatML stand-in tokenizer, which renders
    its prompts as Qwen2.5's template does (the real tokenizer cannot be fetched here)."""
    import yaml

    from searchrl.tiny_policy.model import save_chat_tokenizer

    folder = tmp_path_factory.mktemp("chat")
    tokenizer = save_chat_tokenizer(folder / "tokenizer", ["Who carried out the 2009 Fort Hood shooting?"])
    data = yaml.safe_load((ROOT / "configs/models/qwen2.5-3b-instruct.yaml").read_text())
    path = folder / "model.yaml"
    path.write_text(yaml.safe_dump({**data, "tokenizer_path": str(tokenizer)}))
    return path
