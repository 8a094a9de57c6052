r"""Evaluate on Bamboogle with live web search (R1-Searcher's online setting), through a web-search API.

    python -m eval.run_bamboogle_online --provider serper|brave|tavily|searxng|exa --model configs/models/X.yaml \
        [--engine vllm|openai|hf] [--site en.wikipedia.org] [--fetch-pages [--summarize]] [--cache FILE] [--replay]

API keys come from the environment: SERPER_API_KEY, BRAVE_API_KEY, TAVILY_API_KEY, EXA_API_KEY (SearXNG
needs --provider-url or SEARXNG_URL). Every answer is cached (SQLite), so a run can be replayed exactly
with --replay and no provider call. Bing's Web Search API, which R1-Searcher used, was retired in August
2025. Output as eval/run_local.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError  # noqa: E402

from eval.runner import add_generation_args, episode_from, protocol_from, run_all  # noqa: E402
from searchrl.config import ConfigError  # noqa: E402
from searchrl.jsonl import RecordError  # noqa: E402
from searchrl.search.base import SearchError  # noqa: E402
from searchrl.search.web import WebSearchBackend, WebSearchConfig  # noqa: E402
from searchrl.search.web.backend import web_options  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="searchrl eval online",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    p.add_argument("--provider", required=True, choices=["serper", "brave", "tavily", "searxng", "exa"])
    p.add_argument("--provider-url", default=None, help="the provider's API base URL (SearXNG: your instance)")
    p.add_argument("--dataset", default="bamboogle", help="bamboogle (default), or another dataset spec")
    p.add_argument("--site", default="en.wikipedia.org", help="restrict results to a site; '' for the whole web")
    p.add_argument("--fetch-pages", action="store_true", help="fetch each result page and use its main text")
    p.add_argument("--summarize", action="store_true", help="summarise fetched pages with an LLM (gpt-4o-mini)")
    p.add_argument("--summarizer-url", default="https://api.openai.com/v1")
    p.add_argument("--summarizer-model", default="gpt-4o-mini")
    p.add_argument("--cache", type=Path, default=Path("runs/web_cache.sqlite"), help="SQLite cache of answers")
    p.add_argument("--replay", action="store_true", help="answer searches only from the cache (no provider call)")
    p.add_argument("--rate-limit", type=float, default=1.0, help="provider requests per second")
    p.add_argument("--max-queries", type=int, default=None, help="provider requests this run may send (cache: free)")
    p.add_argument("--max-usd", type=float, default=None, help="estimated USD this run may spend on the provider")
    p.add_argument("--usd-per-query", type=float, default=None, help="price of one request (default: list price)")
    add_generation_args(p)
    args = p.parse_args(argv)
    try:
        config = WebSearchConfig(
            provider=args.provider,
            base_url=args.provider_url,
            site=args.site or None,
            top_k=episode_from(args, protocol_from(args)).top_k,
            fetch_pages=args.fetch_pages,
            summarize=args.summarize,
            summarizer_base_url=args.summarizer_url,
            summarizer_model=args.summarizer_model,
            cache_path=args.cache,
            replay_only=args.replay,
            rate_limit_per_s=args.rate_limit,
            max_queries=args.max_queries,
            max_usd=args.max_usd,
            usd_per_query=args.usd_per_query,
        )
        backend = WebSearchBackend.from_config(config)
        extra = {"search": {**web_options(config), "replay": args.replay}}
        search_id = {"backend": "web", "index": None, "options": web_options(config)}
        try:
            return run_all([args.dataset], args, backend, search_id, extra)
        finally:
            meter = backend.web_budget.stats()
            print(
                f"web search: {meter['queries']} provider requests, {meter['cache_hits']} cache hits, "
                f"est. ${meter['usd']:.4f}",
                file=sys.stderr,
            )
    except ValidationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ConfigError, RecordError, SearchError, ValueError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
