r"""Evaluate on HotpotQA, 2Wiki, MuSiQue, Bamboogle or Search-R1's seven sets with a local search backend.

    python -m eval.run_local --dataset hotpotqa,2wiki,musique,bamboogle | --suite search-r1 [--suite-dir DIR] \
        --model configs/models/X.yaml | --model CHECKPOINT_FOLDER --template base|chat|configs/models/X.yaml \
        [--stage configs/stages/stage2_answer.yaml | --protocol search-r1] [--engine vllm|openai|hf|replay] \
        [--index DIR | --search-url URL | --search CONFIG.yaml] [--limit N] [--out DIR]

Writes per dataset `<name>.jsonl` (question, gold, trajectory, answer, searches, metrics) and
`<name>.summary.json`, plus `results.md` and `results.png` across datasets. `--suite search-r1` runs the
seven sets of Search-R1's table (NQ, TriviaQA, PopQA, HotpotQA, 2wiki, Musique, Bamboogle; FlashRAG's copies,
from the hub or a local download) and adds that table, with Search-R1's EM, to results.md and
`search-r1.md`; `--sample 500` keeps it affordable, and the table says so. Re-running with the same
--out resumes where it stopped (refused if the settings differ; --force-new starts again).
Exit codes: 0 done; 2 bad input; 3 searches failed (--allow-search-errors accepts them); 4 the judge
left records without a verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from eval.resume import search_identity  # noqa: E402
from eval.runner import add_generation_args, run_all  # noqa: E402
from eval.suites import SUITES, suite_specs  # noqa: E402
from searchrl.config import ConfigError, load  # noqa: E402
from searchrl.jsonl import RecordError  # noqa: E402
from searchrl.search.backends import BACKENDS, SearchConfig, open_backend  # noqa: E402
from searchrl.search.base import SearchError  # noqa: E402

# An evaluation is watched, and a question whose search failed is redone by the next run: it gives up sooner than
# training (300 s), and the probe before it only asks whether anything answers.
EVAL_SEARCH_DEADLINE_S = 60.0
PROBE_DEADLINE_S = 5.0


def search_config(args: argparse.Namespace) -> SearchConfig:
    if args.search:
        raw = load(SearchConfig, args.search)
        return raw
    if args.index:
        return SearchConfig(backend="local", index_dir=Path(args.index), device=args.device)
    return SearchConfig(backend="http", urls=args.search_url, deadline_s=args.search_deadline_s)


async def probe(config: SearchConfig) -> str | None:
    """One search through a throwaway client of the retrieval server(s): None when it answers, else why not."""
    backend = open_backend(config.model_copy(update={"deadline_s": min(config.deadline_s, PROBE_DEADLINE_S)}))
    try:
        await backend.search(["searchrl probe"], 1)
        return None
    except SearchError as e:
        return str(e)
    finally:
        await backend.aclose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="searchrl eval local",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--suite", choices=sorted(SUITES), help="a paper's set of datasets, reported in its table's layout"
    )
    which.add_argument(
        "--dataset",
        help="comma-separated: hotpotqa, 2wiki, musique, bamboogle (bundled), hf:NAME[:CONFIG][:SPLIT], or a "
        ".jsonl/.json/.parquet file (R1-Searcher's question/answer, or FlashRAG/Search-R1's golden_answers); "
        "NAME=SPEC names its output files",
    )
    p.add_argument(
        "--suite-dir",
        type=Path,
        help="for --suite: FlashRAG's files downloaded here (<set>/<split>.jsonl) instead of read from the hub",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--index", help="a local index directory (searchrl.search.index.build)")
    src.add_argument("--search-url", default="http://127.0.0.1:8002", help="retrieval server(s), comma-separated")
    src.add_argument("--search", help="a YAML file holding a search config (backend, urls or index_dir, ...)")
    p.add_argument(
        "--search-deadline-s",
        type=float,
        default=EVAL_SEARCH_DEADLINE_S,
        help="for --search-url: how long one search keeps retrying (training waits 300 s for a restart; an "
        "evaluation counts the failure and redoes the question on the next run)",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="for --index")
    add_generation_args(p)
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        config = search_config(args)
        backend = open_backend(config)
        if args.suite_dir and not args.suite:
            raise ValueError("--suite-dir: only with --suite (name files with --dataset NAME=FILE otherwise)")
        if args.suite:
            datasets = suite_specs(args.suite, args.suite_dir)
        else:
            datasets = [d.strip() for d in args.dataset.split(",") if d.strip()]
        check = (lambda: asyncio.run(probe(config))) if BACKENDS[config.backend].probed_before_run else None
        extra = {"suite": args.suite} if args.suite else None
        return run_all(datasets, args, backend, search_identity(config), extra, probe=check)
    except (ConfigError, RecordError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except SearchError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
