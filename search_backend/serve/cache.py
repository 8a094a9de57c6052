"""LRU cache of per-query search results, with hit counters for /health."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from searchrl.search.base import Passage


class ResultCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, list[Passage]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> list[Passage] | None:
        if self.max_entries <= 0:
            return None
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found

    def put(self, key: Hashable, value: list[Passage]) -> None:
        if self.max_entries <= 0:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def stats(self) -> dict[str, float | int]:
        lookups = self.hits + self.misses
        return {
            "entries": len(self._entries),
            "max_entries": self.max_entries,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": self.hits / lookups if lookups else 0.0,
        }
