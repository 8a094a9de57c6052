"""`searchrl index import`: serve a dense index another project built, without encoding its corpus again.

    searchrl index import --layout search-r1 --corpus wiki-18.jsonl --faiss e5_Flat.index \\
        --model intfloat/e5-base-v2 --out indexes/wiki18-e5

Layouts (what each project's own builder writes):
- `search-r1`: JSON lines of `id` and `contents` (`"Title"` on the first line, the text after it), embedded as
  `passage: ` + contents by e5 (mean pooling), in a Flat or HNSW FAISS index of inner products.
- `r1-searcher`: `wiki_corpus_index_bulid/`'s TSV, `row<TAB>Title   text`, the second column embedded as it is by
  bge (CLS pooling, no passage instruction), in a Flat FAISS index of inner products.

The corpus is streamed into this project's passage store (a 21M-line file never sits in memory) and the FAISS file
is hard-linked beside it, or copied where a link cannot be made. `--index-type compact` (or `exact`) instead reads
the stored vectors back a shard at a time into fp16 embedding shards and builds that type from them, so a Flat
index's full matrix never sits in memory and nothing is encoded. Before the manifest is written, a sample of rows
spread over the corpus is encoded with the named model and compared with the vectors the FAISS file holds for those
rows: the wrong model, the wrong pooling or rows shifted against the corpus are refused, with what was found.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm import tqdm

from searchrl.search.base import unquoted
from searchrl.search.encode.encoder import Encoder
from searchrl.search.encode.profiles import PROFILES, profile_for
from searchrl.search.index.build import (
    BuildError,
    add_recall_options,
    build_vector_index,
    compact_or_exact,
    query_texts,
    query_vectors,
    recall_summary,
    settle_index,
)
from searchrl.search.index.corpus import CorpusReport, Record, TooManyBadLines, file_sha256, json_rows, numbered_lines
from searchrl.search.index.index_types import INDEX_TYPES, default_factory, kind_of
from searchrl.search.index.layout import (
    EMBED_DIR,
    EMBED_INFO,
    INDEX_FILE,
    INDEX_INFO,
    MANIFEST,
    MANIFEST_VERSION,
    STORE_DIR,
    STORE_INFO,
    read_json,
    remove_durably,
    write_json_atomic,
)
from searchrl.search.index.shards import shard_paths, write_shard
from searchrl.search.index.store import write_store

log = logging.getLogger(__name__)

LAYOUTS = ("search-r1", "r1-searcher")
# The profile each project's builder encodes with, when --profile and the model's name leave it open.
LAYOUT_PROFILES = {"search-r1": "e5", "r1-searcher": "bge"}
# The token limit each builder truncated passages to (index_builder.py's --max_length, FlagModel's max_length).
LAYOUT_MAX_LENGTH = {"search-r1": 180, "r1-searcher": 300}
SAMPLE_ROWS = 16
# Stored vectors were often encoded in fp16 on GPUs, ours here in fp32: the same model and text agree far above
# this, while another model, another pooling or a neighbouring passage falls well below it.
MIN_COSINE = 0.99
# R1-Searcher's splitter joins the title and the passage's words with three spaces.
R1_TITLE_SEPARATOR = "   "


class IndexImportError(RuntimeError):
    """The files do not make an index this project can serve; the message says what was found."""


def search_r1_records(path: Path, report: CorpusReport) -> Iterator[tuple[Record, str]]:
    """Each passage and the text its builder embedded (before e5's `passage: ` prefix)."""
    for line_no, row in json_rows(numbered_lines(path), report):
        contents = row.get("contents") if isinstance(row, dict) else None
        if not isinstance(contents, str) or row.get("id") in (None, ""):
            report.add_bad(line_no, "needs 'id' and a string 'contents' (Search-R1's wiki-18.jsonl layout)")
            continue
        first, newline, rest = contents.partition("\n")
        title, text = (unquoted(first), rest) if newline else ("", contents)
        yield Record(str(row["id"]), title, text), contents


def r1_searcher_records(path: Path, report: CorpusReport) -> Iterator[tuple[Record, str]]:
    for line_no, line in numbered_lines(path):
        if not line.strip():
            continue
        report.lines += 1
        row, tab, embedded = line.partition("\t")
        if not tab or not embedded.strip():
            report.add_bad(line_no, "expected row<TAB>Title   text (R1-Searcher's split_kilt_to_100.py layout)")
            continue
        title, sep, text = embedded.partition(R1_TITLE_SEPARATOR)
        yield Record(row.strip(), title.strip() if sep else "", text.strip() if sep else embedded), embedded


READERS = {"search-r1": search_r1_records, "r1-searcher": r1_searcher_records}


def sample_rows(n: int, k: int = SAMPLE_ROWS) -> list[int]:
    """`k` rows spread evenly from the first to the last, so a shift anywhere in the file shows."""
    return sorted({int(r) for r in np.linspace(0, n - 1, num=min(k, n))})


def stored_vectors(index, rows: list[int]) -> np.ndarray:  # noqa: ANN001 - a faiss.Index of any kind
    """The vectors the FAISS file holds for `rows`: read back directly (Flat, HNSW) or through an IVF's map."""
    from searchrl.search.index.faiss_import import faiss

    try:
        return np.vstack([index.reconstruct(int(r)) for r in rows])
    except RuntimeError:
        ivf = faiss.extract_index_ivf(index)
        ivf.make_direct_map()
        return np.vstack([index.reconstruct(int(r)) for r in rows])


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.sum(a * b, axis=1) / np.maximum(norms, 1e-12)


def check_rows(index, rows: list[int], texts: list[str], encoder) -> dict:  # noqa: ANN001
    """Encode the sampled passages and compare them with the stored rows; refuse a mismatch with its likely cause."""
    ours = encoder.encode_passages(texts, batch_size=len(texts))
    stored = stored_vectors(index, rows)
    found = cosines(ours, stored)
    result = {"rows": rows, "min_cosine": round(float(found.min()), 6), "mean_cosine": round(float(found.mean()), 6)}
    if found.min() >= MIN_COSINE:
        return result
    # A shift shows as each passage matching a neighbouring row better than its own.
    shifts = {}
    for shift in (-2, -1, 1, 2):
        moved = [min(max(r + shift, 0), index.ntotal - 1) for r in rows]
        shifts[shift] = float(np.median(cosines(ours, stored_vectors(index, moved))))
    best = max(shifts, key=shifts.__getitem__)
    bad = [r for r, c in zip(rows, found, strict=True) if c < MIN_COSINE]
    if shifts[best] >= MIN_COSINE:
        raise IndexImportError(
            f"the corpus and the FAISS file are out of step: passage row r matches stored vector r{best:+d} "
            f"(median cosine {shifts[best]:.4f}, own rows {float(np.median(found)):.4f}); the corpus is not the "
            "file the index was built from, or lines were added or dropped"
        )
    raise IndexImportError(
        f"{len(bad)} of {len(rows)} sampled rows do not match (cosine {float(found.min()):.4f} at worst, "
        f"{MIN_COSINE} needed; rows {bad[:5]}): the index was built with another model, pooling or passage "
        f"prefix than {encoder.model_name} under the {encoder.profile.name} profile (pass --model/--profile)"
    )


def read_mapped(path: Path):  # noqa: ANN201 - a faiss.Index of any kind
    """The index memory-mapped where FAISS can (Flat, IVF): the header and a few rows are read, never the whole
    file (65 GB for Search-R1's Flat). Types FAISS cannot map (HNSW) are read whole."""
    from searchrl.search.index.faiss_import import faiss

    # IO_FLAG_MMAP_IFC maps a flat index's codes (FAISS >= 1.11); IO_FLAG_MMAP alone maps only IVF lists.
    flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY | getattr(faiss, "IO_FLAG_MMAP_IFC", 0)
    try:
        return faiss.read_index(str(path), flags)
    except RuntimeError as exc:
        log.info("FAISS cannot memory-map %s (%s): reading it whole", path, str(exc).splitlines()[0][:120])
    try:
        return faiss.read_index(str(path))
    except RuntimeError as exc:
        raise IndexImportError(f"--faiss {path}: FAISS cannot read it ({str(exc).splitlines()[0][:200]})") from exc


def shards_from(index, out: Path, shard_size: int, info: dict) -> list[Path]:  # noqa: ANN001
    """The stored vectors as fp16 embedding shards, one shard in memory at a time (reused when finished)."""
    n = int(index.ntotal)
    paths = shard_paths(out, max(1, -(-n // shard_size)))
    info = {**info, "shard_size": shard_size, "passages": n, "dimension": int(index.d)}
    if read_json(out / EMBED_INFO) != info:
        shutil.rmtree(out / EMBED_DIR, ignore_errors=True)
        remove_durably(out / EMBED_INFO)
    (out / EMBED_DIR).mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / EMBED_INFO, info)
    for i, path in enumerate(tqdm(paths, desc="vectors", unit=" shards", dynamic_ncols=True)):
        if not path.is_file():
            lo = i * shard_size
            write_shard(path, index.reconstruct_n(lo, min(shard_size, n - lo)))
    return paths


def link_or_copy(source: Path, target: Path) -> str:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
        return "hard link"
    except OSError:
        log.info("cannot hard-link %s into %s (another file system?): copying it", source, target.parent)
        shutil.copyfile(source, target)
        return "copy"


def import_index(
    layout: str,
    corpus: str | Path,
    faiss_file: str | Path,
    model: str,
    out: str | Path,
    profile: str | None = None,
    max_bad_lines: int | None = 0,
    max_seq_length: int | None = None,
    index_type: str = "faiss",
    shard_size: int = 100_000,
    train_size: int = 1_000_000,
    queries: str | Path | None = None,
    accept_recall: float | None = None,
) -> dict:
    """Write an index directory serving `faiss_file` over `corpus`; returns the manifest. `index_type` faiss serves
    the file as it is; compact and exact are built from its vectors, a compact one measuring its recall on
    `queries` (or the corpus's own rows) as a build does (searchrl/search/index/build.py: settle_index)."""
    from searchrl.search.index.faiss_import import faiss  # loads FAISS (and its OpenMP) only when an import runs

    _check_arguments(layout, index_type, corpus, faiss_file, accept_recall)
    corpus, faiss_file, out = Path(corpus), Path(faiss_file), Path(out)
    asked = query_texts(queries)
    profile_name = profile or _profile_name(model, layout)
    index = read_mapped(faiss_file)
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise IndexImportError(f"--faiss {faiss_file}: metric {index.metric_type}, not inner product")
    max_seq_length = max_seq_length or LAYOUT_MAX_LENGTH[layout]
    encoder = _encoder_for(index, faiss_file, model, profile_name, max_seq_length)
    out.mkdir(parents=True, exist_ok=True)
    remove_durably(out / MANIFEST)
    rows = sample_rows(index.ntotal)
    report = CorpusReport()
    count, texts = _write_passage_store(layout, corpus, faiss_file, out, index, rows, report, max_bad_lines)
    check = check_rows(index, rows, [texts[r] for r in rows], encoder)
    checksum = file_sha256(corpus)
    write_json_atomic(
        out / STORE_INFO,
        {"corpus_sha256": checksum, "format": layout, "passages": count, "lines": report.lines,
         "bad_lines": report.bad, "bad_examples": [{"line": n, "reason": r} for n, r in report.examples]},
    )  # fmt: skip
    if not kind_of(index_type).reads_shards:
        served = _serve_as_imported(index, faiss_file, out, checksum)
    else:
        record = {"corpus_sha256": checksum, "model": model, "profile": profile_name, "max_seq_length": max_seq_length,
                  "reconstructed_from": str(faiss_file)}  # fmt: skip

        def vectors() -> tuple[np.ndarray, str]:
            return query_vectors(asked, queries, lambda: encoder, out / STORE_DIR, count)

        served = _rebuild_from_vectors(
            index, out, index_type, shard_size, train_size, checksum, record, vectors, accept_recall
        )
    manifest = {
        "version": MANIFEST_VERSION,
        "model": model,
        "profile": PROFILES[profile_name].to_dict(),
        "dimension": int(index.d),
        "normalize": PROFILES[profile_name].normalize,
        "metric": "inner_product",
        "index_type": served.index_type,
        "factory_requested": None,
        "factory": served.factory,
        "passages": count,
        "recall": served.recall,
        "search_params": served.search_params,
        "corpus": {"path": str(corpus), "sha256": checksum, "format": layout, "lines": report.lines,
                   "bad_lines": report.bad},
        "files": _files_record(served, shard_size),
        "bm25": None,
        "build": {"imported": True, "max_seq_length": max_seq_length},
        "imported": {"layout": layout, "faiss": str(faiss_file), "placed_by": served.placed_by, "row_check": check},
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }  # fmt: skip
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


class _Served(NamedTuple):
    """How the imported vectors are served, as the manifest records it."""

    index_type: str
    factory: str | None
    recall: dict
    search_params: dict
    placed_by: str
    index_bytes: int | None
    shards: list[Path]


def _check_arguments(
    layout: str, index_type: str, corpus: str | Path, faiss_file: str | Path, accept_recall: float | None
) -> None:
    if layout not in LAYOUTS:
        raise IndexImportError(f"--layout {layout!r}: choose one of {', '.join(LAYOUTS)}")
    if index_type not in INDEX_TYPES:
        raise IndexImportError(f"--index-type {index_type!r}: choose one of {', '.join(INDEX_TYPES)}")
    for name, path in (("--corpus", Path(corpus)), ("--faiss", Path(faiss_file))):
        if not path.is_file():
            raise IndexImportError(f"{name} {path}: no such file")
    if accept_recall is not None and not 0 < accept_recall <= 1:
        raise IndexImportError(f"--accept-recall {accept_recall}: a share of the top-10; give a value in (0, 1]")


def _encoder_for(
    index,  # noqa: ANN001 - a faiss.Index of any kind
    faiss_file: Path,
    model: str,
    profile_name: str,
    max_seq_length: int,
) -> Encoder:
    """The model's encoder, refused where its vectors are not the dimension the FAISS file holds."""
    encoder = Encoder(model, profile=PROFILES[profile_name], max_seq_length=max_seq_length, backend="torch")
    if encoder.dimension != index.d:
        raise IndexImportError(
            f"--faiss {faiss_file} holds {index.d}-d vectors, but {model} encodes {encoder.dimension}: another model "
            "built this index (pass --model)"
        )
    return encoder


def _write_passage_store(
    layout: str,
    corpus: Path,
    faiss_file: Path,
    out: Path,
    index,  # noqa: ANN001 - a faiss.Index of any kind
    rows: list[int],
    report: CorpusReport,
    max_bad_lines: int | None,
) -> tuple[int, dict[int, str]]:
    """Stream the corpus into the passage store; returns its passage count and the embedded texts of `rows`."""
    wanted = set(rows)
    texts: dict[int, str] = {}

    def records() -> Iterator[Record]:
        for row, (record, embedded) in enumerate(READERS[layout](corpus, report)):
            if row in wanted:
                texts[row] = embedded
            yield record
        report.check(max_bad_lines, None)

    bar = tqdm(records(), desc="store", unit=" passages", dynamic_ncols=True)
    count = write_store(bar, out / STORE_DIR)
    bar.close()
    if count != index.ntotal:
        raise IndexImportError(
            f"--corpus {corpus} holds {count:,} passages but --faiss {faiss_file} {index.ntotal:,} vectors: "
            "they are not one index's files"
        )
    return count, texts


def _serve_as_imported(index, faiss_file: Path, out: Path, checksum: str) -> _Served:  # noqa: ANN001
    """The FAISS file placed in the index directory as it is (`--index-type faiss`)."""
    from searchrl.search.index.faiss_import import faiss

    how = link_or_copy(faiss_file, out / INDEX_FILE)
    size = (out / INDEX_FILE).stat().st_size
    write_json_atomic(out / INDEX_INFO, {"corpus_sha256": checksum, "imported_from": str(faiss_file),
                                           "bytes": size})  # fmt: skip
    factory = type(faiss.downcast_index(index)).__name__
    exact = isinstance(faiss.downcast_index(index), faiss.IndexFlat)
    recall_record = {"outcome": "exact", "recall": 1.0} if exact else {"outcome": "served as imported, unmeasured"}
    return _Served("faiss", factory, recall_record, {}, how, size, [])


def _rebuild_from_vectors(
    index,  # noqa: ANN001 - a faiss.Index of any kind
    out: Path,
    index_type: str,
    shard_size: int,
    train_size: int,
    checksum: str,
    record: dict,
    queries: Callable[[], tuple[np.ndarray, str]],
    accept_recall: float | None,
) -> _Served:
    """A compact or exact index built from the stored vectors, read back as fp16 shards, its recall settled as a
    build settles it."""
    from searchrl.search.index.faiss_index import effective_factory

    count = int(index.ntotal)
    shards = shards_from(index, out, shard_size, record)
    wanted = default_factory(index_type, int(index.d), count)
    factory = effective_factory(wanted, count) if wanted is not None else None
    index_type, factory, as_exact = compact_or_exact(index_type, factory, count, int(index.d))
    built, _ = build_vector_index(out, shards, int(index.d), index_type, factory, "cpu", train_size, checksum)
    measured = factory
    index_type, factory, recall_record, search_params = settle_index(
        out, shards, index_type, factory, queries, accept_recall
    )
    if factory != measured:  # the compact index fell back to the exact type: its files are removed
        built, _ = build_vector_index(out, shards, int(index.d), index_type, None, "cpu", train_size, checksum)
    if as_exact:
        recall_record = {"outcome": f"exact: compact at {count} passages costs no less memory", "recall": 1.0}
    how, size = f"re-built as {index_type} from the stored vectors", built["bytes"] if factory else None
    return _Served(index_type, factory, recall_record, search_params, how, size, shards)


def _files_record(served: _Served, shard_size: int) -> dict:
    shards = served.shards
    return {
        "index": INDEX_FILE if served.factory else None,
        "index_bytes": served.index_bytes,
        "store": STORE_DIR,
        "embeddings": EMBED_DIR if shards else None,
        "shard_size": shard_size if shards else None,
        "shards": len(shards),
        "embedding_dtype": "float16" if shards else None,
        "embeddings_required": kind_of(served.index_type).reads_shards,
        "bm25": None,
    }


def _profile_name(model: str, layout: str) -> str:
    try:
        return profile_for(model).name
    except ValueError:
        return LAYOUT_PROFILES[layout]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl index import", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--layout", required=True, choices=LAYOUTS, help="which project's builder wrote the files")
    p.add_argument("--corpus", required=True, help="the corpus the index was built from (wiki-18.jsonl, the TSV)")
    p.add_argument("--faiss", required=True, help="the FAISS index file (e5_Flat.index, enwiki_kilt_all.bin, ...)")
    p.add_argument("--model", required=True, help="the encoder that built it: a local folder or a cached hub name")
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="the encoder family (prefixes, pooling) when the model's name does not say "
        f"(default: from the name, else {', '.join(f'{k}: {v}' for k, v in LAYOUT_PROFILES.items())})",
    )
    p.add_argument("--out", required=True, help="the index directory to write")
    p.add_argument(
        "--index-type",
        default="faiss",
        choices=INDEX_TYPES,
        help="faiss: serve the FAISS file as it is (default); compact: IVF-PQ built from its vectors, re-scored "
        "exactly from fp16 shards (a fraction of a Flat index's memory); exact: the fp16 shards alone",
    )
    p.add_argument("--shard-size", type=int, default=100_000, help="vectors per fp16 shard (compact, exact)")
    p.add_argument(
        "--max-seq-length",
        type=int,
        help="the token limit the builder truncated passages to (default: "
        f"{', '.join(f'{k}: {v}' for k, v in LAYOUT_MAX_LENGTH.items())}, their builders' defaults)",
    )
    p.add_argument("--max-bad-lines", type=int, default=0, help="malformed corpus lines allowed (default 0)")
    add_recall_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        manifest = import_index(
            args.layout, args.corpus, args.faiss, args.model, args.out, args.profile, args.max_bad_lines,
            args.max_seq_length, args.index_type, args.shard_size, queries=args.queries,
            accept_recall=args.accept_recall,
        )  # fmt: skip
    except (IndexImportError, TooManyBadLines, BuildError) as exc:
        print(f"index import: {exc}", file=sys.stderr)
        return 2
    check = manifest["imported"]["row_check"]
    print(
        f"imported {manifest['passages']:,} passages ({manifest['factory']}, {manifest['dimension']}-d, "
        f"{manifest['imported']['placed_by']}) into {args.out}; {len(check['rows'])} sampled rows match "
        f"(cosine >= {check['min_cosine']:.4f}). Serve it: searchrl search serve --index {args.out}"
    )
    summary = recall_summary(manifest)
    if summary["recall_top10"] is not None:
        print(
            f"recall: keeps {summary['recall_top10']} of the exact top-10 ({summary['recall_outcome']}; search "
            f"settings {summary['search_params'] or 'none'})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
