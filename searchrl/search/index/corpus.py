"""Streaming corpus readers: KILT knowledge source (split R1-Searcher's way), TSV and JSON lines."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

CorpusFormat = Literal["kilt", "tsv", "jsonl"]
FORMATS: tuple[str, ...] = ("kilt", "tsv", "jsonl")
WORDS_PER_PASSAGE = 100
_MARKER = re.compile(r"(?:BULLET|Section)::::")


class Record(NamedTuple):
    id: str
    title: str
    text: str


class TooManyBadLines(ValueError):
    """The corpus holds more malformed lines than the build allows."""


@dataclass
class CorpusReport:
    """Malformed lines seen while reading: kept (line number, reason) for the first few, counted for all."""

    lines: int = 0
    bad: int = 0
    examples: list[tuple[int, str]] = field(default_factory=list)
    keep_examples: int = 20

    def add_bad(self, line_no: int, reason: str) -> None:
        self.bad += 1
        if len(self.examples) < self.keep_examples:
            self.examples.append((line_no, reason))

    def summary(self) -> str:
        shown = "; ".join(f"line {n}: {r}" for n, r in self.examples)
        return f"{self.bad} malformed of {self.lines} lines" + (f" ({shown})" if shown else "")

    def check(self, max_bad_lines: int | None = 0, max_bad_fraction: float | None = None) -> None:
        """Raise TooManyBadLines when either limit is passed (None disables that limit)."""
        if max_bad_lines is not None and self.bad > max_bad_lines:
            raise TooManyBadLines(f"{self.summary()}; more than --max-bad-lines {max_bad_lines}")
        if max_bad_fraction is not None and self.lines and self.bad / self.lines > max_bad_fraction:
            raise TooManyBadLines(f"{self.summary()}; more than --max-bad-fraction {max_bad_fraction}")


def clean_kilt_paragraph(paragraph: str) -> str:
    """Drop KILT's structure markers but keep what they label (a section name, a bullet's text)."""
    return _MARKER.sub("", paragraph).strip()


def split_words(text: str, words: int = WORDS_PER_PASSAGE) -> Iterator[str]:
    tokens = text.split()
    for start in range(0, len(tokens), words):
        yield " ".join(tokens[start : start + words])


def kilt_passages(page: dict, words: int = WORDS_PER_PASSAGE) -> Iterator[tuple[str, str]]:
    """(title, passage) pairs of one KILT page: paragraphs joined, markers dropped, cut every `words` words."""
    title = page["wikipedia_title"]
    paragraphs = list(page["text"])
    # KILT repeats the page title as the first paragraph; it is kept as the title instead of as body text.
    if paragraphs and paragraphs[0].strip() == title.strip():
        paragraphs = paragraphs[1:]
    body = " ".join(clean_kilt_paragraph(p) for p in paragraphs)
    for chunk in split_words(body, words):
        yield title, chunk


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open("r", encoding="utf-8", errors="strict", newline="\n") as handle:
        line_no = 0
        while True:
            line_no += 1
            try:
                line = handle.readline()
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}: line {line_no} is not UTF-8 ({exc})") from exc
            if not line:
                return
            yield line_no, line.rstrip("\r\n")


def parse_kilt(
    lines: Iterator[tuple[int, str]],
    report: CorpusReport,
    words: int = WORDS_PER_PASSAGE,
) -> Iterator[Record]:
    ordinal = 0
    for line_no, line in lines:
        if not line.strip():
            continue
        report.lines += 1
        try:
            page = json.loads(line)
            if not isinstance(page, dict) or not isinstance(page.get("wikipedia_title"), str):
                raise ValueError("no string 'wikipedia_title'")
            if not isinstance(page.get("text"), list) or not all(isinstance(p, str) for p in page["text"]):
                raise ValueError("'text' is not a list of strings")
        except ValueError as exc:
            report.add_bad(line_no, str(exc))
            continue
        for title, chunk in kilt_passages(page, words):
            yield Record(str(ordinal), title, chunk)
            ordinal += 1


def parse_tsv(lines: Iterator[tuple[int, str]], report: CorpusReport) -> Iterator[Record]:
    for line_no, line in lines:
        if not line.strip():
            continue
        if line_no == 1 and line.split("\t")[:2] == ["id", "text"]:
            continue
        report.lines += 1
        cols = line.split("\t")
        if len(cols) not in (2, 3) or not cols[0].strip() or not cols[1].strip():
            report.add_bad(line_no, f"expected id<TAB>text[<TAB>title], got {len(cols)} column(s)")
            continue
        yield Record(cols[0].strip(), cols[2].strip() if len(cols) == 3 else "", cols[1].strip())


def json_rows(lines: Iterator[tuple[int, str]], report: CorpusReport) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank line; a line that is not JSON goes to `report`."""
    for line_no, line in lines:
        if not line.strip():
            continue
        report.lines += 1
        try:
            yield line_no, json.loads(line)
        except ValueError as exc:
            report.add_bad(line_no, f"invalid JSON ({exc})")


def parse_jsonl(lines: Iterator[tuple[int, str]], report: CorpusReport) -> Iterator[Record]:
    for line_no, row in json_rows(lines, report):
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or row.get("id") in (None, ""):
            report.add_bad(line_no, "needs 'id' and a string 'text'")
            continue
        title = row.get("title") or ""
        if not isinstance(title, str):
            report.add_bad(line_no, "'title' is not a string")
            continue
        yield Record(str(row["id"]), title, row["text"])


def parse_lines(lines: Iterator[tuple[int, str]], fmt: CorpusFormat, report: CorpusReport) -> Iterator[Record]:
    if fmt == "kilt":
        return parse_kilt(lines, report)
    if fmt == "tsv":
        return parse_tsv(lines, report)
    if fmt == "jsonl":
        return parse_jsonl(lines, report)
    raise ValueError(f"unknown corpus format {fmt!r}; expected one of {FORMATS}")


def read_corpus(path: str | Path, fmt: CorpusFormat, report: CorpusReport | None = None) -> Iterator[Record]:
    """Stream a corpus file's passages; malformed lines go to `report` instead of stopping the stream."""
    return parse_lines(numbered_lines(Path(path)), fmt, report if report is not None else CorpusReport())


def read_text(text: str, fmt: CorpusFormat, report: CorpusReport | None = None) -> Iterator[Record]:
    """The same readers over an in-memory string (tests, small inputs)."""
    lines = ((n, line) for n, line in enumerate(text.split("\n"), start=1))
    return parse_lines(lines, fmt, report if report is not None else CorpusReport())


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
