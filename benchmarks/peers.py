"""Run a peer project's retrieval server, unchanged, over this project's index and encoder.

    python -m benchmarks.peers search-r1 --file PATH/search_r1/search/retrieval_server.py --index DIR --port N
    python -m benchmarks.peers r1-searcher --file PATH/train/wiki_corpus_load.py --index DIR --port N

The peers are not bundled: the file is loaded from the path given (a clone of PeterGriffinJin/Search-R1 or
RUCAIBox/R1-Searcher), its request handling used as written, and only what ties it to its authors'
machines is replaced, so that both peers and this project's server serve the same passages with the same
model on the same CPU:

- the corpus: a file in the peer's own format written from the index's passage store, in row order
  (Search-R1: JSON lines of `id` and `contents` = quoted title, newline, text; R1-Searcher: one line per
  passage, `Title: ... Text: ...`, the string its model saw), and the index's own FAISS file;
- Search-R1: its `Config` built here instead of from its command line (this MiniLM, mean pooling, fp32, no
  GPU FAISS), `.cuda()` made the identity since this machine has no GPU, and uvicorn bound to loopback on
  the given port;
- R1-Searcher: `FlagEmbedding.FlagModel` (a BGE wrapper, CLS pooling) stood in for by the same MiniLM
  through sentence-transformers with its `encode_queries` method; Flask's server bound to loopback;
- `--threads N` caps torch's and FAISS's threads as the project's server does (the peers ship with their
  libraries' defaults, measured too).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PEERS = ("search-r1", "r1-searcher")


def load_file(path: Path, name: str) -> types.ModuleType:
    """The peer's file as a module (not as __main__, so its own start-up block does not run)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--file {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def corpus_rows(index_dir: Path) -> tuple[list[Any], Path, str]:
    """The index's passages in row order, its FAISS file and the model path."""
    from searchrl.search.encode.profiles import resolve_model
    from searchrl.search.index.layout import INDEX_FILE, STORE_DIR, load_manifest
    from searchrl.search.index.store import PassageStore

    manifest = load_manifest(index_dir)
    store = PassageStore(index_dir / manifest["files"].get("store", STORE_DIR))
    rows = [store[r] for r in range(len(store))]
    return rows, index_dir / manifest["files"].get("index", INDEX_FILE), resolve_model(manifest["model"])


def search_r1(file: Path, index_dir: Path, port: int, work: Path) -> None:
    import torch
    import uvicorn

    # No GPU here: the peer moves its model and inputs with .cuda(), which becomes the identity.
    torch.nn.Module.cuda = lambda self, device=None: self  # type: ignore[method-assign]
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    rows, index_path, model_path = corpus_rows(index_dir)
    corpus = work / "search_r1_corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as out:
        for p in rows:
            out.write(json.dumps({"id": p.id, "contents": f'"{p.title}"\n{p.text}'}) + "\n")
    peer = load_file(file, "search_r1_retrieval_server")
    peer.config = peer.Config(
        retrieval_method="minilm",
        index_path=str(index_path),
        corpus_path=str(corpus),
        retrieval_topk=3,
        faiss_gpu=False,
        retrieval_model_path=str(model_path),
        retrieval_pooling_method="mean",
        retrieval_query_max_length=256,
        retrieval_use_fp16=False,
        retrieval_batch_size=512,
    )
    peer.retriever = peer.get_retriever(peer.config)
    uvicorn.run(peer.app, host="127.0.0.1", port=port, log_level="warning")


class MiniLMFlagModel:
    """FlagEmbedding.FlagModel's query side over this project's MiniLM (mean pooling, normalised)."""

    def __init__(self, model_name_or_path: str, query_instruction_for_retrieval: str = "", use_fp16: bool = False):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(model_name_or_path, device="cpu")
        self.instruction = query_instruction_for_retrieval

    def encode_queries(self, queries: list[str]) -> Any:
        texts = [self.instruction + q for q in queries]
        return self.model.encode(texts, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)


def r1_searcher(file: Path, index_dir: Path, port: int) -> None:
    import faiss

    if importlib.util.find_spec("flask") is None:
        raise SystemExit("r1-searcher: its server is a Flask app and Flask is not installed; pip install flask")

    from searchrl.search.base import Passage, r1_text

    stand_in = types.ModuleType("FlagEmbedding")
    stand_in.FlagModel = MiniLMFlagModel  # type: ignore[attr-defined]
    sys.modules["FlagEmbedding"] = stand_in
    rows, index_path, model_path = corpus_rows(index_dir)
    peer = load_file(file, "r1_searcher_retriever")
    peer.model = peer.FlagModel(str(model_path), query_instruction_for_retrieval="", use_fp16=False)
    peer.corpus = [r1_text(Passage(p.id, p.title, p.text, 0.0)).replace("\n", " ") for p in rows]
    peer.index = faiss.read_index(str(index_path))
    peer.app.run(host="127.0.0.1", port=port, debug=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("peer", choices=PEERS)
    p.add_argument("--file", type=Path, required=True, help="the peer's server file, from a clone of its repository")
    p.add_argument("--index", type=Path, required=True, help="index directory made by searchrl.search.index.build")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--threads", type=int, help="torch and FAISS CPU threads (default: theirs, as the peer ships)")
    args = p.parse_args(argv)
    if not args.file.is_file():
        raise SystemExit(f"--file {args.file}: not found; give the path of the peer's server file in a clone")
    if args.threads:
        from searchrl.search.index.cpu_threads import set_threads

        set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="searchrl-peer-") as work:
        if args.peer == "search-r1":
            search_r1(args.file, args.index, args.port, Path(work))
        else:
            r1_searcher(args.file, args.index, args.port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
