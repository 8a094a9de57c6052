"""`searchrl index build --ray local`: shards encoded by a pool of Ray Data workers are the one-process build's,
byte for byte, and a re-run encodes only the shards that are missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from searchrl.paths import ROOT
from searchrl.search.index.build import BuildError, build, parser

# 8 shards of 12 passages: 4 for each of the 2 workers, at a small share of the cost of the whole corpus (the fixed
# costs, Ray's start and each worker's model load, are most of this test's time).
PASSAGES, SHARD = 96, 12
# What differs between two builds of the same index: when they ran and how long they took.
TIMES = ("encode_seconds", "model_load_seconds", "index_seconds", "encoded_passages")


def ray_build(corpus: Path, out: Path) -> list[int]:
    """Build with `--ray local --ray-workers 2` in a fresh process (Ray starts and stops in it); returns the shards
    it encoded, as its log names them."""
    cmd = [sys.executable, "-m", "searchrl.search.index.build", "--corpus", str(corpus), "--format", "jsonl",
           "--out", str(out), "--shard-size", str(SHARD), "--batch-size", str(SHARD), "--ray", "local",
           "--ray-workers", "2"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=300)
    assert "on 2 Ray workers" in done.stderr
    return sorted(int(s) for s in re.findall(r"encoded shard (\d+):", done.stderr))


def same_files(out: Path, reference: Path) -> None:
    names = sorted(p.name for p in (reference / "embeddings").glob("shard_*.npy"))
    assert len(names) == PASSAGES // SHARD
    assert sorted(p.name for p in (out / "embeddings").glob("shard_*.npy")) == names
    for name in names:
        assert (out / "embeddings" / name).read_bytes() == (reference / "embeddings" / name).read_bytes(), name
    assert (out / "index.faiss").read_bytes() == (reference / "index.faiss").read_bytes()


def manifest(out: Path) -> dict:
    data = json.loads((out / "manifest.json").read_text())
    data.pop("created")
    for key in TIMES:
        data["build"].pop(key)
    return data


# About 45 s (a Ray cluster and two encoder loads, twice): CI runs it in one of its lanes (`-m slow`), not in the
# suite.
@pytest.mark.slow
def test_ray_build_is_the_one_process_build_and_resumes(tmp_path):
    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("".join((ROOT / "examples/mini_corpus.jsonl").read_text().splitlines(keepends=True)[:PASSAGES]))
    reference = tmp_path / "reference"
    build(corpus, "jsonl", reference, shard_size=SHARD, batch_size=SHARD)

    out = tmp_path / "ray"
    assert ray_build(corpus, out) == list(range(PASSAGES // SHARD))
    same_files(out, reference)
    assert manifest(out) == manifest(reference)

    # A build cut off with two shards unfinished, one of them half-written under its temp name.
    embeddings = out / "embeddings"
    (embeddings / "shard_00002.npy").unlink()
    (embeddings / "shard_00005.npy").rename(embeddings / "shard_00005.npy.tmp")
    kept = {p.name: p.stat().st_mtime_ns for p in embeddings.glob("shard_*.npy")}
    assert ray_build(corpus, out) == [2, 5]
    assert {name: (embeddings / name).stat().st_mtime_ns for name in kept} == kept
    same_files(out, reference)
    assert manifest(out) == manifest(reference)


def test_ray_flags_reach_the_build():
    args = parser().parse_args(["--corpus", "c", "--format", "jsonl", "--out", "o", "--ray", "auto"])
    assert (args.ray, args.ray_workers) == ("auto", None)
    args = parser().parse_args(["--corpus", "c", "--format", "jsonl", "--out", "o", "--ray-workers", "3"])
    assert (args.ray, args.ray_workers) == (None, 3)


def test_ray_build_names_a_device_it_cannot_use(tmp_path):
    with pytest.raises(BuildError, match="cpu or cuda"):
        build(tmp_path / "none.jsonl", "jsonl", tmp_path / "out", device="cuda:1", ray="local")
    assert not (tmp_path / "out").exists()
