"""`searchrl`: one command line for everything a user runs; each subcommand is an existing module's `main(argv)`.

The leading words pick the command (`searchrl search serve ...`); every argument after them goes untouched
to the target, whose own parser gives `--help`. Targets are imported only when run, so a command costs
nothing until used and a module that moves is a one-line change in COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple


class Command(NamedTuple):
    module: str
    function: str
    help: str
    fixed_args: tuple[str, ...] = ()  # put before the user's arguments, e.g. `gmtrouter train`'s subcommand


COMMANDS: dict[str, Command] = {
    "index build": Command("searchrl.search.index.build", "main", "build a search index (dense, BM25) from a corpus"),
    "index import": Command(
        "searchrl.search.index.importer", "main", "serve Search-R1's or R1-Searcher's index files without re-encoding"
    ),
    "search serve": Command("search_backend.serve.app", "main", "serve an index over HTTP (the retrieval server)"),
    "search query": Command("search_backend.search", "main", "search an index from the shell, one-shot"),
    "search mcp": Command(
        "search_backend.mcp_server", "main", "any search backend as an MCP server's search tool (stdio or HTTP)"
    ),
    "reward serve": Command("reward_server.__main__", "main", "serve a stage's reward over HTTP (the reward server)"),
    "reward score": Command("reward_server.offline", "main", "score logged rollouts offline with a reward spec"),
    "data prepare stage1": Command("stage1_format.prepare_data", "main", "stage 1 prompts, bucketed and mixed"),
    "data prepare stage2": Command("stage2_answer.prepare_data", "main", "stage 2 prompts"),
    "data prepare search_r1": Command(
        "stage2_answer.prepare_data", "search_r1_main", "Search-R1's data (its parquet) in its protocol and prompt"
    ),
    "data prepare router_r1": Command(
        "stage_router_r1.prepare_data", "main", "Router-R1 prompts: QA mixes or Router-R1's JSON, with the pool"
    ),
    "data prepare sft": Command(
        "searchrl.qa_data.sft_data", "main", "SFT trajectories in the protocol, documents masked (OpenRLHF multi-turn)"
    ),
    "stage submit": Command("searchrl.job.submit", "main", "preflight, then `ray job submit` a training stage"),
    "stage rehearse": Command(
        "searchrl.rehearsal.command", "main", "run a stage's job as Ray runs it, on CPU, and check it"
    ),
    "stage preflight": Command(
        "searchrl.job.submit", "preflight_main", "every check of a submission, as a checklist; submits nothing"
    ),
    "stage dry-run": Command("searchrl.job.submit", "dry_run_main", "print the exact `ray job submit` command"),
    "stage plan": Command("searchrl.job.memory_plan", "main", "what each GPU will hold, and whether it fits"),
    "servers start": Command("launch.servers", "start", "start the retrieval and reward servers in the background"),
    "servers stop": Command("launch.servers", "stop", "stop the servers `servers start` started"),
    "eval local": Command("eval.run_local", "main", "evaluate a model on the local benchmarks (KILT index)"),
    "eval online": Command("eval.run_bamboogle_online", "main", "evaluate on Bamboogle with live web search"),
    "eval judge": Command("eval.judge", "main", "add LLM-judge verdicts (ACC_L) to a results file"),
    "eval score": Command("eval.score", "main", "EM, cover-EM, F1 (and ACC_L) of a results file"),
    "eval routing": Command(
        "eval.routing", "main", "a routing policy against cheapest/largest/random baselines: quality and cost"
    ),
    "eval report": Command("eval.report", "main", "rewrite results.md and results.png of an output folder"),
    "eval tiny-checkpoint": Command("eval.tiny_checkpoint", "main", "write a tiny random checkpoint for CPU runs"),
    "gmtrouter train": Command(
        "searchrl.routing.gmtrouter.__main__", "main", "train the personalised router on interaction logs", ("train",)
    ),
    "gmtrouter evaluate": Command(
        "searchrl.routing.gmtrouter.__main__",
        "main",
        "preference accuracy and NDCG@k against popularity and non-personalised routing",
        ("evaluate",),
    ),
    "gmtrouter synthesize": Command(
        "searchrl.routing.gmtrouter.__main__",
        "main",
        "synthetic users with known, differing preferences",
        ("synthesize",),
    ),
    "health": Command("searchrl.health", "main", "training-health curves from TensorBoard logs, collapse flags"),
    "view": Command("searchrl.view.app", "main", "a run's episodes and curves in the browser (a local page)"),
    "quickstart": Command("launch.quickstart", "main", "the main job on embedded defaults (CPU demo or real job)"),
}

GROUPS: dict[str, str] = {
    "index": "build or import search indexes",
    "search": "serve and query an index (over HTTP or as an MCP tool)",
    "reward": "serve and compute rewards",
    "data": "prepare training data",
    "data prepare": "write a stage's prompt dataset for OpenRLHF",
    "stage": "submit, rehearse or check a training stage (STAGE: stage1, stage2, router_r1, rag_r1 or sft)",
    "servers": "the retrieval and reward servers of a training run",
    "eval": "evaluate models and score results",
    "gmtrouter": "the personalised routing policy (GMTRouter): train, evaluate, synthetic users",
}


def build_parser() -> argparse.ArgumentParser:
    """The command tree as argparse parsers, for its help listings and its errors; leaves take no arguments."""
    root = argparse.ArgumentParser(
        prog="searchrl",
        description="Teach an LLM to search while it reasons: index, serve, train, evaluate.",
        epilog="`searchrl COMMAND --help` shows a command's own options.",
    )
    parsers: dict[str, argparse.ArgumentParser] = {"": root}
    subparsers: dict[str, argparse._SubParsersAction] = {}
    for key in [*GROUPS, *COMMANDS]:
        parent, _, word = key.rpartition(" ")
        if parent not in subparsers:
            subparsers[parent] = parsers[parent].add_subparsers(
                dest=f"command_{len(parent.split())}", metavar="COMMAND", required=True
            )
        if key in COMMANDS:
            parsers[key] = subparsers[parent].add_parser(word, help=COMMANDS[key].help, add_help=False)
        else:
            parsers[key] = subparsers[parent].add_parser(word, help=GROUPS[key], description=GROUPS[key])
    return root


def target(command: Command) -> Callable[[list[str]], int | None]:
    return getattr(importlib.import_module(command.module), command.function)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prefixes = {" ".join(k.split()[:i]) for k in [*GROUPS, *COMMANDS] for i in range(1, len(k.split()) + 1)}
    n = 0
    while n < len(argv) and " ".join(argv[: n + 1]) in prefixes:
        n += 1
    key = " ".join(argv[:n])
    if key not in COMMANDS:
        # A group, an unknown word or --help: argparse prints the listing or the error (exit 0 or 2).
        build_parser().parse_args(argv[: n + 1])
        return 2
    command = COMMANDS[key]
    return int(target(command)([*command.fixed_args, *argv[n:]]) or 0)


if __name__ == "__main__":
    sys.exit(main())
