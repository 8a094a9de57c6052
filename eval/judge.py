"""LLM-as-judge (ACC_L) through any OpenAI-compatible chat endpoint, with R1-Searcher's judging rule:
a prediction is correct when it fully aligns with the meaning and key information of the gold answer.

Verdicts are cached on disk (SQLite, keyed by judge model, question, golds and prediction), one cache
shared by every output folder by default, so a re-run, a resumed or a replayed evaluation pays for each
judgement once.

    python -m eval.judge FILE.jsonl --judge-url URL [--judge-model M] [--pred-key pred_ans] [--out FILE]

judges the records of an existing results file that have no verdict yet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from eval.score import score_file
from eval.summary import EXIT_UNJUDGED, refresh_summary
from eval.verdicts import JudgeKeys, fill_verdicts
from searchrl.http_transport import HttpRefusedError, RequestEncodingError, RetryableError, RetryPolicy
from searchrl.jsonl import RecordError
from searchrl.openai_client import ChatAnswer, OpenAIClient, endpoint_url, key_from_env
from searchrl.shared_sqlite import connect_shared

INSTRUCTION = (
    "You are grading an answer to a question. Decide whether the predicted answer fully matches the meaning "
    "and the key information of the gold answer; wording, formatting and minor differences that do not change "
    "the meaning are fine. Reply with exactly one word: True or False."
)


class JudgeError(ValueError):
    """The judge endpoint gave no usable verdict."""


DEFAULT_CACHE = Path("runs/judge_cache.sqlite")


class VerdictCache:
    def __init__(self, path: Path) -> None:
        # Several evaluations may share the cache at once: WAL lets them read while one writes.
        self._db = connect_shared(
            path,
            "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, verdict INTEGER, raw TEXT)",
            isolation_level="DEFERRED",
        )
        self._lock = threading.Lock()

    def get(self, key: str) -> bool | None:
        with self._lock:
            row = self._db.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
        return None if row is None else bool(row[0])

    def put(self, key: str, verdict: bool, raw: str) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?)", (key, int(verdict), raw))


def parse_verdict(text: str) -> bool:
    """True or False from the judge's reply; JudgeError (a ValueError, so the reply is asked again) otherwise."""
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
        self.model = model
        self.url = endpoint_url(base_url, "chat/completions")
        self.retries = retries
        self.cache = VerdictCache(cache_path)
        self.calls = 0
        self._llm = OpenAIClient(
            base_url,
            api_key=key_from_env(api_key_env),
            retry=RetryPolicy(retries=retries, backoff_s=0.5, backoff_max_s=10.0),
            timeout_s=timeout_s,
            max_in_flight=concurrency,
        )

    def _key(self, question: str, golds: Sequence[str], prediction: str) -> str:
        return json.dumps([self.model, question, list(golds), prediction])

    async def judge(self, question: str, golds: Sequence[str], prediction: str) -> bool:
        key = self._key(question, golds, prediction)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        content = f"Question: {question}\nGold answer: {' | '.join(golds)}\nPredicted answer: {prediction}"
        messages = [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": content}]

        def verdict_of(answer: ChatAnswer) -> tuple[bool, str]:
            self.calls += 1
            return parse_verdict(answer.content), answer.content

        try:
            verdict, raw = await self._llm.chat(self.model, messages, parse=verdict_of, temperature=0)
        except RequestEncodingError as e:
            raise JudgeError(f"{self.url}: {e}") from None
        except HttpRefusedError as e:
            raise JudgeError(f"{self.url}: refused: HTTP {e.status}") from None
        except RetryableError as e:
            raise JudgeError(f"{self.url}: no verdict after {e.tries} tries ({e})") from None
        self.cache.put(key, verdict, raw)
        return verdict

    async def aclose(self) -> None:
        await self._llm.aclose()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl eval judge",
        description="Judge (ACC_L) the records of a results file that have no verdict yet; the file is updated "
        "in place (or written to --out), and so are the summary and report of an evaluation folder.",
    )
    p.add_argument("file", type=Path, help="JSONL results, one question per line (eval/run_local.py's, or others')")
    p.add_argument("--judge-url", required=True, help="OpenAI-compatible endpoint of the judge")
    p.add_argument("--judge-model", default="gpt-4o-mini")
    p.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="env var holding the judge's API key")
    p.add_argument("--judge-cache", type=Path, default=DEFAULT_CACHE, help="verdict cache (SQLite, shared)")
    p.add_argument("--question-key", default="question")
    p.add_argument("--answer-key", default="answer", help="gold answer(s)")
    p.add_argument("--pred-key", default="pred_ans", help="the extracted answer; '' to parse the trajectory")
    p.add_argument("--trajectory-key", default="gen_text_store")
    p.add_argument("--judge-key", default="judge", help="where verdicts go (True/False); the model in <key>_model")
    p.add_argument("--out", type=Path, default=None, help="write the judged records here instead of FILE")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    keys = JudgeKeys(args.question_key, args.answer_key, args.pred_key or None, args.trajectory_key, args.judge_key)
    judge = LLMJudge(args.judge_url, args.judge_model, args.judge_cache, api_key_env=args.judge_key_env)

    async def go():  # noqa: ANN202
        try:
            return await fill_verdicts(args.file, judge, keys, args.out)
        finally:
            await judge.aclose()

    try:
        result = asyncio.run(go())
        target = args.out or args.file
        if keys == JudgeKeys():
            refresh_summary(target, judge.model)
        print(
            f"{target}: {result.judged_now} judged now ({judge.calls} judge calls), {result.missing} without a verdict"
        )
        if result.missing:
            print(f"error: {result.missing} records have no verdict ({result.error}); run again", file=sys.stderr)
            return EXIT_UNJUDGED
        scores = score_file(str(target), args.pred_key or None, args.answer_key, args.judge_key, args.trajectory_key)
    except (RecordError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"ACC_L={100 * scores['acc_l']:.1f} EM={100 * scores['em']:.1f} n={scores['n']} (judge {judge.model})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
