"""WebBudget: the run's meter of web search spend (provider requests, cache hits, estimated USD) and its limits.

Every provider request is reserved before it is sent, so any number of concurrent searches stops exactly at
`max_queries` / `max_usd`. A reservation is kept when the provider may have billed the request (a 2xx answer, or a
timeout after it was sent) and released when it cannot have (no connection, or any non-2xx status: Serper and Brave
bill successful requests only). The meter lives in SQLite: in memory by default, or in `budget_path`, where every
process of the run and every restart share one count.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from searchrl.search.base import Passage
from searchrl.search.web.errors import WebBudgetExhaustedError
from searchrl.search.web_settings import WebSearchConfig
from searchrl.shared_sqlite import connect_shared

log = logging.getLogger(__name__)

OnExhausted = Literal["error", "notice"]


@dataclass(frozen=True, slots=True)
class ListPrice:
    usd_per_query: float
    # What each result beyond the first 10 of one request adds (Exa bills them; the others' base covers our counts).
    usd_per_extra_result: float = 0.0


# Public pay-as-you-go list prices of one web search request, read 2026-11 (volume tiers are cheaper; a plan's
# free monthly credits are not counted). Override with search.web.usd_per_query.
#   serper:  https://serper.dev pricing, Starter: $50 for 50,000 credits ($1.00/1k); a search of 10 results is
#            1 credit (100 results: 2)
#   brave:   https://api-dashboard.search.brave.com/app/plans, Search plan: $5.00 per 1,000 requests
#   tavily:  https://docs.tavily.com/documentation/api-credits, pay-as-you-go $0.008 per credit; a basic search is
#            1 credit
#   exa:     https://exa.ai/docs/changelog/pricing-update (2026-03-03): search with contents $7 per 1,000 requests of
#            up to 10 results, $1 per 1,000 results beyond 10
#   searxng: self-hosted, no per-request price
LIST_PRICES: dict[str, ListPrice] = {
    "serper": ListPrice(0.001),
    "brave": ListPrice(0.005),
    "tavily": ListPrice(0.008),
    "exa": ListPrice(0.007, usd_per_extra_result=0.001),
    "searxng": ListPrice(0.0),
}
WARN_AT = 0.8
NOTICE_ID = "search-budget-exhausted"
_NANO = 1_000_000_000  # spend is kept in integer nano-USD, so a limit compares exactly, with no float drift

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    queries INTEGER NOT NULL,
    cache_hits INTEGER NOT NULL,
    refused INTEGER NOT NULL,
    nano_usd INTEGER NOT NULL,
    updated_at REAL NOT NULL
)
"""


def _nano(usd: float) -> int:
    return round(usd * _NANO)


def _usd(nano: int) -> str:
    usd = nano / _NANO
    return f"${usd:,.2f}" if usd >= 1 or usd == 0 else f"${usd:.4f}"


@dataclass(frozen=True, slots=True)
class Charge:
    """One reserved provider request: what release() gives back."""

    nano_usd: int


class WebBudget:
    """Thread-safe (one lock around one connection); across processes, SQLite's write lock orders reservations."""

    def __init__(
        self,
        provider: str,
        *,
        max_queries: int | None = None,
        max_usd: float | None = None,
        usd_per_query: float | None = None,
        on_exhausted: OnExhausted = "error",
        path: str | Path | None = None,
    ) -> None:
        self.provider = provider
        self.price = LIST_PRICES[provider] if usd_per_query is None else ListPrice(usd_per_query)
        if max_usd is not None and self.price.usd_per_query == 0 and self.price.usd_per_extra_result == 0:
            raise ValueError(
                f"search.web.max_usd: {provider} requests are priced at $0 (search.web.usd_per_query), so this "
                "limit can never be reached; set search.web.max_queries instead, or usd_per_query to the real price"
            )
        self.max_queries = max_queries
        self.max_usd = max_usd
        self.on_exhausted = on_exhausted
        self.path = Path(path) if path is not None else None
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._final: dict[str, Any] | None = None
        if self.path is not None:
            self._db = connect_shared(self.path, _SCHEMA)
        else:
            self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            self._db.execute(_SCHEMA)
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO meter VALUES (1, 0, 0, 0, 0, ?)", (time.time(),))
        if self.path is None and (max_queries is not None or max_usd is not None):
            # Training opens one backend per engine process: without a shared file each counts on its own.
            log.warning(
                "web search budget: search.web.budget_path is not set, so the limits hold per process and a "
                "restart counts from zero; set it to one file per run to cap the whole run"
            )

    @classmethod
    def from_config(cls, config: WebSearchConfig) -> WebBudget:
        return cls(
            config.provider,
            max_queries=config.max_queries,
            max_usd=config.max_usd,
            usd_per_query=config.usd_per_query,
            on_exhausted=config.on_budget_exhausted,
            path=config.budget_path,
        )

    def price_of(self, count: int) -> float:
        """Estimated USD of one request for `count` results."""
        return self.price.usd_per_query + max(0, count - 10) * self.price.usd_per_extra_result

    def reserve(self, count: int) -> Charge:
        """Count one provider request for `count` results before it is sent; WebBudgetExhaustedError at a limit."""
        cost = _nano(self.price_of(count))
        with self._lock:
            # IMMEDIATE takes the write lock before the read, so two processes cannot both pass the check.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                queries, nano = self._db.execute("SELECT queries, nano_usd FROM meter").fetchone()
                refusal = self._refusal(queries, nano, cost)
                if refusal is None:
                    queries, nano = queries + 1, nano + cost
                    self._db.execute(
                        "UPDATE meter SET queries = ?, nano_usd = ?, updated_at = ?", (queries, nano, time.time())
                    )
                else:
                    self._db.execute("UPDATE meter SET refused = refused + 1, updated_at = ?", (time.time(),))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        if refusal is not None:
            raise refusal
        self._warn(queries, nano)
        return Charge(cost)

    def release(self, charge: Charge) -> None:
        """Give back a reservation whose request the provider cannot have billed."""
        with self._lock:
            self._db.execute(
                "UPDATE meter SET queries = queries - 1, nano_usd = nano_usd - ?, updated_at = ?",
                (charge.nano_usd, time.time()),
            )

    def cache_hit(self) -> None:
        with self._lock:
            self._db.execute("UPDATE meter SET cache_hits = cache_hits + 1")

    def _refusal(self, queries: int, nano: int, cost: int) -> WebBudgetExhaustedError | None:
        if self.max_queries is not None and queries + 1 > self.max_queries:
            field, setting, extra = "max_queries", self.max_queries, ""
        elif self.max_usd is not None and nano + cost > _nano(self.max_usd):
            field, setting, extra = "max_usd", self.max_usd, f"; the next would cost {_usd(cost)}"
        else:
            return None
        kept = f" (counted in {self.path})" if self.path is not None else ""
        return WebBudgetExhaustedError(
            f"web search budget exhausted: search.web.{field}={setting} reached ({queries} queries sent to "
            f"{self.provider}, est. {_usd(nano)}{extra}){kept}; raise search.web.{field}, or set "
            "search.web.on_budget_exhausted: notice to let episodes go on without web results",
            field=f"search.web.{field}",
        )

    def _warn(self, queries: int, nano: int) -> None:
        used = {
            "max_queries": (queries, self.max_queries or 0),
            "max_usd": (nano, _nano(self.max_usd) if self.max_usd else 0),
        }
        for field, (spent, limit) in used.items():
            if limit and spent >= WARN_AT * limit and field not in self._warned:
                self._warned.add(field)
                setting = self.max_queries if field == "max_queries" else self.max_usd
                log.warning(
                    "web search budget: %d%% of search.web.%s=%s used (%d queries sent to %s, est. %s); at 100%% %s",
                    round(100 * spent / limit),
                    field,
                    setting,
                    queries,
                    self.provider,
                    _usd(nano),
                    "the run stops" if self.on_exhausted == "error" else "searches answer 'search budget exhausted'",
                )

    def notice(self, error: WebBudgetExhaustedError) -> Passage:
        """The passage a query gets in notice mode: the policy reads that search is over, never an empty result."""
        return Passage(
            NOTICE_ID,
            "",
            f"Search budget exhausted: no documents are available for this query ({error.field} reached).",
            0.0,
        )

    def stats(self) -> dict[str, Any]:
        """The meter for /health: what was sent and spent, and the limits it is held to."""
        if self._final is not None:
            return dict(self._final)
        with self._lock:
            queries, hits, refused, nano = self._db.execute(
                "SELECT queries, cache_hits, refused, nano_usd FROM meter"
            ).fetchone()
        return {
            "provider": self.provider,
            "queries": queries,
            "cache_hits": hits,
            "refused": refused,
            "usd": nano / _NANO,
            "usd_per_query": self.price.usd_per_query,
            "max_queries": self.max_queries,
            "max_usd": self.max_usd,
            "exhausted": self._refusal(queries, nano, _nano(self.price.usd_per_query)) is not None,
            "on_exhausted": self.on_exhausted,
            "path": str(self.path) if self.path is not None else None,
        }

    def scalars(self) -> dict[str, float]:
        """The meter as the episode logs that reach TensorBoard (train/web_*)."""
        stats = self.stats()
        return {
            "web_queries": float(stats["queries"]),
            "web_cache_hits": float(stats["cache_hits"]),
            "web_refused": float(stats["refused"]),
            "web_usd": float(stats["usd"]),
        }

    def close(self) -> None:
        # The meter's last reading stays: a command reports what a run spent after its backend closed.
        final = self.stats()
        with self._lock:
            self._db.close()
            self._final = final
