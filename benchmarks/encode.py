"""Encoding throughput: raw `SentenceTransformer.encode(texts, batch_size)` beside the index builder, per device.

    python -m benchmarks.encode --corpus passages.jsonl [--offset 3000] [--limit 640] [--devices cpu,cuda]

Both encode the same slice of passages (title line + text, as the builder embeds them), alternating raw and
builder runs `--rounds` times in one process (which goes first alternates too) so that a shared machine's load
hits both alike; the headline is the median of the per-round ratios. On a CPU the builder runs once per encoder
backend in each round (`--builder-backends`, default torch, its default, then onnx); on a GPU it runs PyTorch in
fp16. The builder's
rate is passages / (its encode step minus its model load), the time from the store to the written fp16 shards,
since the raw call is also timed with the model already loaded. On `cuda` the builder uses every visible GPU
(one worker each); the raw call runs on cuda:0 in fp16, so per-GPU figures are raw x GPUs at best.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.tables import save  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402
from searchrl.search.encode.encoder import Encoder, passage_text  # noqa: E402
from searchrl.search.encode.profiles import DEFAULT_MODEL  # noqa: E402
from searchrl.search.index.build import GPU_BATCH, build  # noqa: E402


def read_slice(path: Path, offset: int, limit: int) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for i, line in enumerate(handle):
            if i >= offset + limit:
                break
            if i >= offset and line.strip():
                rows.append(json.loads(line))
    if not rows:
        raise SystemExit(f"--corpus {path}: no passages in lines {offset}..{offset + limit}")
    return rows


def raw_rate(encoder: Encoder, texts: list[str], batch_size: int) -> float:
    started = time.perf_counter()
    encoder.model.encode(
        texts,
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=encoder.profile.normalize,
        show_progress_bar=False,
    )
    return len(texts) / (time.perf_counter() - started)


def padded_tokens(encoder: Encoder, texts: list[str], batch_size: int) -> dict[str, int]:
    """Tokens the model computes (each batch padded to its longest text) under each ordering."""
    lengths = encoder.token_lengths(texts)

    def padded(order: np.ndarray) -> int:
        return int(
            sum(
                lengths[order[i : i + batch_size]].max() * len(order[i : i + batch_size])
                for i in range(0, len(order), batch_size)
            )
        )

    return {
        "real": int(lengths.sum()),
        "corpus_order": padded(np.arange(len(texts))),
        "character_sort (sentence-transformers)": padded(np.argsort([-len(t) for t in texts], kind="stable")),
        "token_sort (builder)": padded(np.argsort(-lengths, kind="stable")),
    }


def unsorted_rate(encoder: Encoder, texts: list[str], batch_size: int) -> float:
    """The previous builder's way: one encode call per batch_size passages in corpus order (no length sort)."""
    started = time.perf_counter()
    for lo in range(0, len(texts), batch_size):
        encoder.encode_passages(texts[lo : lo + batch_size], batch_size=batch_size)
    return len(texts) / (time.perf_counter() - started)


def builder_rate(
    corpus: Path, model: str, device: str, batch_size: int, work: Path, backend: str
) -> tuple[float, dict]:
    out = work / "index"
    shutil.rmtree(out, ignore_errors=True)
    manifest = build(corpus, "jsonl", out, model=model, device=device, batch_size=batch_size, encoder_backend=backend)
    timing = manifest["build"]
    seconds = timing["encode_seconds"] - timing["model_load_seconds"]
    return manifest["passages"] / seconds, timing


def measure(
    device: str,
    rows: list[dict],
    model: str,
    batch_size: int,
    rounds: int,
    work: Path,
    with_unsorted: bool,
    backends: list[str],
) -> dict:
    corpus = work / "slice.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    texts = [passage_text(r.get("title", ""), r["text"]) for r in rows]
    encoder = Encoder(model, device="cuda:0" if device == "cuda" else device, backend="torch")
    encoder.model.encode(texts[:batch_size], batch_size=batch_size, show_progress_bar=False)  # warm-up
    backends = backends if device == "cpu" else ["torch"]
    raw, unsorted = [], []
    built: dict[str, list[float]] = {b: [] for b in backends}
    timings: dict[str, dict] = {}
    for i in range(rounds):
        # Alternating which goes first cancels a machine that gets busier or quieter during the run.
        if i % 2 == 0:
            raw.append(raw_rate(encoder, texts, batch_size))
        for backend in backends if i % 2 == 0 else backends[::-1]:
            rate, timings[backend] = builder_rate(corpus, model, device, batch_size, work, backend)
            built[backend].append(rate)
        if i % 2 == 1:
            raw.append(raw_rate(encoder, texts, batch_size))
        if with_unsorted:
            unsorted.append(unsorted_rate(encoder, texts, batch_size))
        extra = f", previous builder's per-batch calls {unsorted[-1]:.1f}" if unsorted else ""
        shown = ", ".join(f"builder ({b}) {built[b][-1]:.1f}" for b in backends)
        print(f"{device} round {i + 1}: raw {raw[-1]:.1f} passages/s, {shown}{extra}", flush=True)
    first = backends[0]
    ratios = [b / r for b, r in zip(built[first], raw, strict=True)]
    return {
        "padded_tokens": padded_tokens(encoder, texts, batch_size),
        "device": device,
        "gpus": timings[first]["gpus"],
        "batch_size": batch_size,
        "passages": len(texts),
        "builder_backend": first,
        "raw_passages_per_s": [round(r, 2) for r in raw],
        "builder_passages_per_s": [round(b, 2) for b in built[first]],
        "ratio_per_round": [round(r, 3) for r in ratios],
        "median_raw_passages_per_s": round(statistics.median(raw), 2),
        "median_builder_passages_per_s": round(statistics.median(built[first]), 2),
        "ratio_of_medians": round(statistics.median(built[first]) / statistics.median(raw), 3),
        "median_ratio": round(statistics.median(ratios), 3),
        "builders": {
            b: {
                "passages_per_s": [round(x, 2) for x in rates],
                "median_passages_per_s": round(statistics.median(rates), 2),
                "median_ratio_to_raw": round(statistics.median(x / r for x, r in zip(rates, raw, strict=True)), 3),
                "model_load_seconds": timings[b]["model_load_seconds"],
                "median_ratio_to_first": round(
                    statistics.median(x / f for x, f in zip(rates, built[first], strict=True)), 3
                ),
            }
            for b, rates in built.items()
        },
        "unsorted_per_batch_passages_per_s": [round(u, 2) for u in unsorted],
        "unsorted_ratio_of_medians": round(statistics.median(unsorted) / statistics.median(raw), 3)
        if unsorted
        else None,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, required=True, help="JSONL passages {id, title, text}, e.g. kiltmini's")
    p.add_argument("--offset", type=int, default=3000, help="first line of the slice")
    p.add_argument("--limit", type=int, default=640, help="passages in the slice")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--devices", default="cpu", help="comma list of cpu and/or cuda")
    p.add_argument("--batch-size", type=int, default=None, help=f"default 64 on CPU, {GPU_BATCH} on GPU")
    p.add_argument("--rounds", type=int, default=5, help="raw/builder rounds per device (order alternates)")
    p.add_argument(
        "--builder-backends",
        default="torch,onnx",
        help="the builder's encoder backends on CPU, each measured every round; the first is the headline",
    )
    p.add_argument(
        "--no-unsorted",
        action="store_true",
        help="skip the reference run of the previous builder's way (per-batch calls, corpus order)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "encode.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch

    rows = read_slice(args.corpus, args.offset, args.limit)
    result: dict = {
        "date": dt.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        },
        "model": args.model,
        "slice": {"corpus": args.corpus.name, "offset": args.offset, "passages": len(rows)},
        "devices": [],
    }
    for device in [d.strip() for d in args.devices.split(",") if d.strip()]:
        batch = args.batch_size or (GPU_BATCH if device == "cuda" else 64)
        with tempfile.TemporaryDirectory(prefix="searchrl-encode-") as work:
            result["devices"].append(
                measure(
                    device,
                    rows,
                    args.model,
                    batch,
                    args.rounds,
                    Path(work),
                    not args.no_unsorted,
                    [b.strip() for b in args.builder_backends.split(",") if b.strip()],
                )
            )
        print(json.dumps(result["devices"][-1]), flush=True)
    save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
