"""What every provider module supplies: the HTTP request for a query, and the parse of its documented answer."""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from searchrl.search.web.errors import MalformedResponseError, MissingCredentialError


@dataclass(frozen=True, slots=True)
class Hit:
    url: str
    title: str
    text: str
    score: float | None
    # The page's own text when the provider already fetched it (Tavily raw_content), which saves a fetch.
    page_text: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    method: Literal["GET", "POST"]
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str | int] | None = None
    json: dict[str, Any] | None = None


class Provider:
    name: ClassVar[str]
    default_base_url: ClassVar[str]
    key_env: ClassVar[str | None]
    max_count: ClassVar[int] = 20

    def __init__(self, api_key: str | None, base_url: str | None = None) -> None:
        self._api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")

    def __repr__(self) -> str:
        # The key stays out of reprs, so it cannot leak through logs or tracebacks that print the object.
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    @classmethod
    def from_env(cls, base_url: str | None = None, key_env: str | None = None, require_key: bool = True) -> Provider:
        env = key_env or cls.key_env
        key = os.environ.get(env) if env else None
        if require_key and env and not key:
            raise MissingCredentialError(f"{cls.name}: set the environment variable {env} to the provider's API key")
        return cls(key, base_url)

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self._api_key,) if self._api_key else ()

    def refusal_hint(self, status: int) -> str:
        return f" (is {self.key_env} right?)" if status in (401, 403) and self.key_env else ""

    def request(self, query: str, count: int, site: str | None, with_page_text: bool) -> ProviderRequest:
        raise NotImplementedError

    def parse(self, body: object) -> list[Hit]:
        raise NotImplementedError


def site_query(query: str, site: str | None) -> str:
    return f"site:{site} {query}" if site else query


_TAG = re.compile(r"<[^>]{0,200}>")


def clean_snippet(value: object) -> str:
    """Plain text from a provider snippet: Brave and SearXNG put <strong> tags and HTML entities in theirs."""
    if not isinstance(value, str):
        return ""
    return " ".join(html.unescape(_TAG.sub("", value)).split())


def result_list(body: object, *path: str, absent_ok: bool = False) -> list[dict[str, Any]]:
    """The result items at `path` in a JSON body, each checked to be an object; MalformedResponseError otherwise."""
    node = body
    for key in path:
        if not isinstance(node, dict):
            raise MalformedResponseError(f"expected a JSON object holding {'.'.join(path)!r}")
        if key not in node:
            if absent_ok:
                return []
            raise MalformedResponseError(f"response has no {'.'.join(path)!r}")
        node = node[key]
    if not isinstance(node, list) or not all(isinstance(item, dict) for item in node):
        raise MalformedResponseError(f"{'.'.join(path)!r} is not a list of objects")
    return node


def required_url(item: dict[str, Any], key: str) -> str:
    url = item.get(key)
    if not isinstance(url, str) or not url:
        raise MalformedResponseError(f"a result has no {key!r} string")
    return url


def optional_score(item: dict[str, Any], key: str = "score") -> float | None:
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
