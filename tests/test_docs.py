"""The README and docs/: the README stays an entry point, every link resolves, every `searchrl` command shown
exists, and docs/BENCHMARKS.md's tables are exactly what benchmarks/tables.py renders from the JSON."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from benchmarks import tables
from launch.cli import COMMANDS, GROUPS
from searchrl.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def broken_links(path: Path) -> list[str]:
    text = SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: outside the repository
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            problems.append(f"{path.name}: {target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            problems.append(f"{path.name}: {target}: no heading #{anchor} in {dest.name}")
    return problems


def code_of(text: str) -> list[str]:
    return [*FENCE.findall(text), *SPAN.findall(FENCE.sub("", text))]


def bad_commands(text: str) -> list[str]:
    """Each `searchrl ...` shown in code whose leading words are not a subcommand (`a|b` alternatives each)."""
    prefixes = {" ".join(k.split()[:i]) for k in [*GROUPS, *COMMANDS] for i in range(1, len(k.split()) + 1)}
    problems = []
    for code in code_of(text):
        for m in re.finditer(r"\bsearchrl\b((?: +[^\s`]+)*)", code):
            words, paths, ok = m.group(1).split(), [""], True
            for word in words:
                if all(p in COMMANDS for p in paths):
                    break
                if word in ("--help", "-h") or word.isupper():  # a group's help; the generic `searchrl COMMAND`
                    break
                paths = [f"{p} {alt}".strip() for p in paths for alt in word.split("|")]
                if not all(p in prefixes for p in paths):
                    ok = False
                    break
            # Bare `searchrl` names the program; anything else must reach a command or stop at --help.
            if not ok or (words and paths != [""] and not all(p in COMMANDS for p in paths) and "--help" not in words):
                problems.append(f"searchrl{m.group(1)}")
    return problems


def test_readme_is_an_entry_point():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 220
    first = text.split("\n\n")[1]
    assert "](" not in first and "../" not in first and "http" not in first, "the first paragraph leaves the repo"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_searchrl_commands_exist(page):
    assert bad_commands(page.read_text(encoding="utf-8")) == []


def test_checkers_catch_what_they_are_for(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n")
    page.write_text(
        "# Page\n\n[ok](other.md#a-section) [ok](#page) [gone](missing.md) [bad](other.md#nope) "
        "`[not a link](nowhere.md)`\n"
    )
    assert broken_links(page) == [
        "page.md: missing.md: no such file",
        "page.md: other.md#nope: no heading #nope in other.md",
    ]
    text = (
        "`searchrl index build --out X` `searchrl stage submit|rehearse stage1` `searchrl eval --help` `searchrl` "
        "`searchrl COMMAND --help` `searchrl stage submit|rehaerse stage1` `searchrl data prepare`\n"
        "```\nsearchrl serach serve\nsearchrl data prepare stage3\n```"
    )
    assert bad_commands(text) == [
        "searchrl serach serve",
        "searchrl data prepare stage3",
        "searchrl stage submit|rehaerse stage1",
        "searchrl data prepare",
    ]


def test_benchmark_tables_are_rendered_from_the_json():
    page = tables.PAGE.read_text(encoding="utf-8")
    assert tables.render(page) == page, "docs/BENCHMARKS.md differs from the JSON: run python -m benchmarks.tables"
    shown = {m[1] for m in tables.BLOCK.findall(page)}
    assert shown == set(tables.TABLES), "every table the script knows appears on the page"


def test_a_changed_figure_changes_the_page(tmp_path, monkeypatch):
    results = tmp_path / "results"
    shutil.copytree(tables.RESULTS, results)
    data = json.loads((results / "hybrid.json").read_text())
    data["recall_of_bge_top1"]["hybrid"]["@5"] = 0.1234
    (results / "hybrid.json").write_text(json.dumps(data))
    monkeypatch.setattr(tables, "RESULTS", results)
    page = tables.PAGE.read_text(encoding="utf-8")
    assert "0.123" in tables.render(page) and tables.render(page) != page


def test_benchmarks_prose_holds_no_figure():
    """Numbers on the page come from the rendered tables only; the hand-written prose names none."""
    text = tables.BLOCK.sub("", tables.PAGE.read_text(encoding="utf-8"))
    text = LINK.sub("", SPAN.sub("", FENCE.sub("", text)))
    assert re.findall(r"(?<![\w@/.-])\d[\d,.]*", text) == []


def test_architecture_layers_match():
    """docs/ARCHITECTURE.md's layer table, highest first, is tests/test_architecture.py's LAYERS reversed: each row's
    first cell names its layer's packages (several side by side for a tuple)."""
    from tests.test_architecture import LAYERS

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = text.split("<!-- layers -->\n", 1)[1].split("<!-- /layers -->", 1)[0]
    rows = [line.split("|")[1] for line in block.splitlines()[2:] if line.startswith("|")]
    shown = [names[0] if len(names := re.findall(r"`([^`]+)`", row)) == 1 else tuple(names) for row in rows]
    assert shown == list(reversed(LAYERS)), "docs/ARCHITECTURE.md's layer table differs from LAYERS"


# README.md and docs/*.md together: a user can read them through.
DOCS_BUDGET_BYTES = 180_000


def test_docs_fit_budget():
    sizes = {page.name: len(page.read_bytes()) for page in PAGES}
    assert sum(sizes.values()) <= DOCS_BUDGET_BYTES, sorted(sizes.items(), key=lambda kv: -kv[1])
