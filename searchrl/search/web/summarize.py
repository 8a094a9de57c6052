"""Page summaries by an LLM behind an OpenAI-compatible /v1/chat/completions endpoint (R1-Searcher: gpt-4o-mini)."""

from __future__ import annotations

from searchrl.http_transport import HttpRefusedError, HttpSession, RequestEncodingError, RetryableError, RetryPolicy
from searchrl.openai_client import OpenAIClient, endpoint_url
from searchrl.search.web.errors import SummarizeError

INSTRUCTION = (
    "You help a search assistant. Read the web page below and pull out only what bears on the search query: "
    "facts, names, dates and numbers that could help answer it. Write them as a single plain paragraph of at most "
    "120 words, in your own words, without preamble. If the page says nothing useful for the query, reply with "
    "exactly the word None."
)


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
        self.model = model
        self.key_env = key_env
        self.max_page_chars = max_page_chars
        self.max_tokens = max_tokens
        self.retries = retries
        retry = RetryPolicy(
            retries=retries, backoff_s=backoff_s, backoff_max_s=backoff_max_s, retry_after_max_s=retry_after_max_s
        )
        self._llm = OpenAIClient(base_url, api_key=api_key, retry=retry, timeout_s=timeout_s, session=client)
        self.url = endpoint_url(base_url, "chat/completions")

    def __repr__(self) -> str:
        return f"Summarizer(url={self.url!r}, model={self.model!r})"

    def messages(self, query: str, title: str, text: str) -> list[dict[str, str]]:
        page = text[: self.max_page_chars]
        return [
            {"role": "system", "content": INSTRUCTION},
            {"role": "user", "content": f"Search query: {query}\n\nPage title: {title}\n\nPage text:\n{page}"},
        ]

    async def summarize(self, query: str, title: str, text: str) -> str | None:
        """One paragraph of what the page says about `query`, or None when the model finds nothing relevant."""
        try:
            answer = await self._llm.chat(
                self.model, self.messages(query, title, text), temperature=0, max_tokens=self.max_tokens
            )
        except RequestEncodingError as exc:
            raise SummarizeError(f"summarisation request not sent: {exc}") from None
        except HttpRefusedError as exc:
            hint = f" (is {self.key_env} set?)" if exc.status in (401, 403) and self.key_env else ""
            raise SummarizeError(f"{self.url} refused the request: HTTP {exc.status}{hint}") from None
        except RetryableError as exc:
            raise SummarizeError(f"summarisation failed after {self.retries + 1} tries: {exc}") from exc
        content = answer.content
        return None if is_none_answer(content) else " ".join(content.split())

    async def aclose(self) -> None:
        await self._llm.aclose()
