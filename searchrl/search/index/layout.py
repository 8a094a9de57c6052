"""The layout of an index directory: the names of its files and folders, the small JSON records beside them
(written atomically; read back as None when absent or not valid JSON), and `load_manifest`, which checks a directory's
manifest against the store's record before any backend opens the rest.

The builder writes this layout and every backend reads it; both import it from here, so neither depends on
the other for a file name.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from searchrl.search.base import index_identity
from searchrl.search.index.index_types import INDEX_TYPES

MANIFEST = "manifest.json"
INDEX_FILE = "index.faiss"
INDEX_INFO = "index.json"
STORE_DIR = "store"
STORE_INFO = "store.json"
EMBED_DIR = "embeddings"
EMBED_INFO = "embeddings.json"
BM25_DIR = "bm25"
BM25_INFO = "bm25.json"
MANIFEST_VERSION = 2


class IndexValidationError(RuntimeError):
    """The index directory is unusable; the message names the offending file."""


def write_json_atomic(path: Path, payload: dict) -> None:
    # A temporary name of the writer's own: two builds that reuse one finished index (jobs side by side) rewrite
    # its records at once, and a shared name let one writer rename the other's file from under it.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def remove_durably(path: Path) -> None:
    """Unlink `path` and sync its directory, so the removal is on disk before anything that follows it."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_manifest(index_dir: Path) -> dict:
    path = index_dir / MANIFEST
    if not path.is_file():
        raise IndexValidationError(f"{path} not found: not an index directory, or its build never finished")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise IndexValidationError(f"{path} is not valid JSON: {exc}") from exc
    missing = [
        k for k in ("model", "dimension", "passages", "factory", "profile", "files", "corpus") if k not in manifest
    ]
    if missing:
        raise IndexValidationError(f"{path} lacks {missing}")
    manifest.setdefault("index_type", "faiss")
    if manifest["index_type"] not in INDEX_TYPES:
        raise IndexValidationError(
            f"{path}: index_type {manifest['index_type']!r} unknown to this version (known: {list(INDEX_TYPES)})"
        )
    check_record(index_dir, STORE_INFO, manifest)
    return manifest


def check_record(index_dir: Path, name: str, manifest: dict) -> None:
    """A step's record must name the manifest's corpus: otherwise a rebuild was cut off after changing it."""
    record = read_json(index_dir / name)
    want = manifest["corpus"].get("sha256")
    if record is None or record.get("corpus_sha256") != want:
        found = (record or {}).get("corpus_sha256")
        raise IndexValidationError(
            f"{index_dir / name} records corpus {str(found)[:12]}, the manifest "
            f"{str(want)[:12]}: a rebuild of this directory did not finish; re-run it"
        )


def index_dir_identity(index_dir: Path | str | None) -> dict | None:
    """`index_identity` of the manifest in `index_dir`, None when there is none to read."""
    return index_identity(read_json(Path(index_dir) / MANIFEST)) if index_dir else None
