"""LLM-as-judge (ACC_L) through any OpenAI-compatible chat endpoint, with R1-Searcher's judging rule:
a prediction is correct when it fully aligns with the meaning and key information of the gold answer.

Verdicts are cached on disk (SQLite, keyed by judge model, question, golds and prediction), so a
re-run or a resumed evaluation pays for each judgement once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from search_backend.http_transport import HttpSession, RequestEncodingError, RetryableError, encode_json

INSTRUCTION = (
    "You are grading an answer to a question. Decide whether the predicted answer fully matches the meaning "
    "and the key information of the gold answer; wording, formatting and minor differences that do not change "
    "the meaning are fine. Reply with exactly one word: True or False."
)


class JudgeError(RuntimeError):
    """The judge endpoint gave no usable verdict."""


class VerdictCache:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, verdict INTEGER, raw TEXT)")
        self._lock = threading.Lock()

    def get(self, key: str) -> bool | None:
        with self._lock:
            row = self._db.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
        return None if row is None else bool(row[0])

    def put(self, key: str, verdict: bool, raw: str) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?)", (key, int(verdict), raw))


def parse_verdict(text: str) -> bool:
    words = text.strip().strip(".").split()
    first = words[0].strip(".,:;!\"'").lower() if words else ""
    if first in ("true", "false"):
        return first == "true"
    raise JudgeError(f"the judge answered {text[:80]!r}, not True or False")


class LLMJudge:
    def __init__(
        self,
        base_url: str,
        model: str,
        cache_path: Path,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        retries: int = 3,
        concurrency: int = 16,
    ) -> None:
        key = os.environ.get(api_key_env)
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.retries = retries
        self.cache = VerdictCache(cache_path)
        self.calls = 0
        self._sem = asyncio.Semaphore(concurrency)
        headers = {"Authorization": f"Bearer {key}"} if key else None
        self._http = HttpSession(timeout_s=timeout_s, max_in_flight=concurrency, headers=headers)

    def _key(self, question: str, golds: Sequence[str], prediction: str) -> str:
        return json.dumps([self.model, question, list(golds), prediction])

    async def judge(self, question: str, golds: Sequence[str], prediction: str) -> bool:
        key = self._key(question, golds, prediction)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        content = f"Question: {question}\nGold answer: {' | '.join(golds)}\nPredicted answer: {prediction}"
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": content}],
        }
        try:
            data = encode_json(body)
        except RequestEncodingError as e:
            raise JudgeError(f"{self.url}: {e}") from None
        last = ""
        async with self._sem:
            for attempt in range(self.retries + 1):
                try:
                    self.calls += 1
                    resp = await self._http.send("POST", self.url, body=data)
                    if resp.status == 200:
                        raw = resp.json()["choices"][0]["message"]["content"]
                        verdict = parse_verdict(raw)
                        self.cache.put(key, verdict, raw)
                        return verdict
                    last = f"HTTP {resp.status}"
                except (RetryableError, KeyError, IndexError, ValueError, JudgeError) as e:
                    last = f"{type(e).__name__}: {e}"
                await asyncio.sleep(min(2.0**attempt * 0.5, 10.0))
        raise JudgeError(f"{self.url}: no verdict after {self.retries + 1} tries ({last})")

    async def aclose(self) -> None:
        await self._http.aclose()
