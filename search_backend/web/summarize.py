"""Page summaries by an LLM behind an OpenAI-compatible /v1/chat/completions endpoint (R1-Searcher: gpt-4o-mini)."""

from __future__ import annotations

from search_backend.http_transport import HttpSession, RequestEncodingError, RetryableError, encode_json, with_retries
from search_backend.web.errors import SummarizeError

INSTRUCTION = (
    "You help a search assistant. Read the web page below and pull out only what bears on the search query: "
    "facts, names, dates and numbers that could help answer it. Write them as a single plain paragraph of at most "
    "120 words, in your own words, without preamble. If the page says nothing useful for the query, reply with "
    "exactly the word None."
)


def chat_completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"


def is_none_answer(content: str) -> bool:
    return content.strip().strip(".'\"`").lower() in {"none", "none."}


class Summarizer:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        key_env: str | None = None,
        client: HttpSession | None = None,
        timeout_s: float = 60.0,
        max_page_chars: int = 12_000,
        max_tokens: int = 256,
        retries: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        retry_after_max_s: float = 60.0,
    ) -> None:
        self.url = chat_completions_url(base_url)
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.key_env = key_env
        self._owns_client = client is None
        self._client = client or HttpSession(timeout_s=timeout_s)
        self.max_page_chars = max_page_chars
        self.max_tokens = max_tokens
        self._retry = {
            "retries": retries,
            "backoff_s": backoff_s,
            "backoff_max_s": backoff_max_s,
            "retry_after_max_s": retry_after_max_s,
        }

    def __repr__(self) -> str:
        return f"Summarizer(url={self.url!r}, model={self.model!r})"

    def messages(self, query: str, title: str, text: str) -> list[dict[str, str]]:
        page = text[: self.max_page_chars]
        return [
            {"role": "system", "content": INSTRUCTION},
            {"role": "user", "content": f"Search query: {query}\n\nPage title: {title}\n\nPage text:\n{page}"},
        ]

    async def _once(self, body: bytes) -> str:
        response = await self._client.send("POST", self.url, body=body, headers=self._headers)
        if response.status == 429 or response.status >= 500:
            raise RetryableError(f"{self.url}: HTTP {response.status}", response.retry_after_s)
        if response.status >= 400:
            hint = f" (is {self.key_env} set?)" if response.status in (401, 403) and self.key_env else ""
            raise SummarizeError(f"{self.url} refused the request: HTTP {response.status}{hint}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise RetryableError(f"{self.url}: not an OpenAI chat completion") from exc
        if not isinstance(content, str):
            raise RetryableError(f"{self.url}: message content is not text")
        return content

    async def summarize(self, query: str, title: str, text: str) -> str | None:
        """One paragraph of what the page says about `query`, or None when the model finds nothing relevant."""
        payload = {
            "model": self.model,
            "messages": self.messages(query, title, text),
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }
        try:
            body = encode_json(payload)
            content = await with_retries(lambda: self._once(body), **self._retry)
        except RequestEncodingError as exc:
            raise SummarizeError(f"summarisation request not sent: {exc}") from None
        except RetryableError as exc:
            raise SummarizeError(f"summarisation failed after {self._retry['retries'] + 1} tries: {exc}") from exc
        return None if is_none_answer(content) else " ".join(content.split())

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
