"""One client for OpenAI-compatible endpoints (`/chat/completions`, `/completions`): the judge, the page
summariser, the LLM router and the evaluation engine all speak through it, over the shared transport
and its retry helper (429, 5xx and connection trouble retried, Retry-After honoured; other 4xx at once).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from searchrl.http_transport import HttpSession, RetryPolicy, json_object

T = TypeVar("T")


def endpoint_url(base_url: str, path: str) -> str:
    """`path` under an OpenAI-compatible base URL. A bare host gets `/v1`; any other base is kept as given,
    since providers put the API under their own prefixes (`/v1`, `/v1beta/openai`, ...).

    >>> endpoint_url("https://api.openai.com/v1", "chat/completions")
    'https://api.openai.com/v1/chat/completions'
    >>> endpoint_url("http://127.0.0.1:8000/", "completions")
    'http://127.0.0.1:8000/v1/completions'
    >>> endpoint_url("https://host/api/openai/", "chat/completions")
    'https://host/api/openai/chat/completions'
    """
    base = base_url.rstrip("/")
    if not urlsplit(base).path:
        base += "/v1"
    return f"{base}/{path.lstrip('/')}"


def bearer(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def key_from_env(env: str | None) -> str | None:
    return os.environ.get(env) if env else None


@dataclass(frozen=True)
class ChatAnswer:
    content: str
    usage: Mapping[str, Any] = field(default_factory=dict)


def chat_answer(data: Any) -> ChatAnswer:
    """The first choice's message text and the usage block; ValueError (retried) when the answer has neither."""
    data = json_object(data)
    content = json_object(json_object(data["choices"][0])["message"])["content"]
    if not isinstance(content, str):
        raise ValueError("message content is not text")
    usage = data.get("usage")
    return ChatAnswer(content, usage if isinstance(usage, dict) else {})


def first_choice(data: Any) -> dict[str, Any]:
    return json_object(json_object(data)["choices"][0])


class OpenAIClient:
    """Requests to one OpenAI-compatible endpoint. Failures surface as the transport's errors:
    RequestEncodingError (nothing sent), HttpRefusedError (a 4xx other than 408/429), RetryableError
    (the retry policy spent); callers turn them into their own domain's errors."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 60.0,
        max_in_flight: int = 256,
        session: HttpSession | None = None,
    ) -> None:
        self.base_url = base_url
        self.retry = retry or RetryPolicy()
        self._headers = bearer(api_key)
        self._owns_session = session is None
        self._http = session or HttpSession(timeout_s=timeout_s, max_in_flight=max_in_flight)

    def url(self, path: str) -> str:
        return endpoint_url(self.base_url, path)

    async def chat(
        self,
        model: str,
        messages: list[dict[str, str]],
        parse: Callable[[ChatAnswer], T] = lambda answer: answer,  # type: ignore[assignment,return-value]
        **params: Any,
    ) -> T:
        """POST chat/completions; `parse` of the answer, retried like a 5xx when it raises ValueError."""
        body = {"model": model, "messages": messages, **params}
        return await self._http.call_json(
            "POST",
            self.url("chat/completions"),
            body,
            parse=lambda data: parse(chat_answer(data)),
            retry=self.retry,
            headers=self._headers,
        )

    async def complete(self, model: str, prompt: str, **params: Any) -> dict[str, Any]:
        """POST completions; the first choice."""
        body = {"model": model, "prompt": prompt, **params}
        return await self._http.call_json(
            "POST", self.url("completions"), body, parse=first_choice, retry=self.retry, headers=self._headers
        )

    async def aclose(self) -> None:
        if self._owns_session:
            await self._http.aclose()
