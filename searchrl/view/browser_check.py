"""`python -m searchrl.view.browser_check RUN_DIR --out DIR`: the viewer driven in headless Chromium over a run,
served and exported, with screenshots and one JSON line of what held.

The walk: the curves draw (SVG paths through points), a filter narrows the list to the count the API's own filter
gives (served) and the page's script gives (exported: the same count, so the two filter alike), an episode opens
with its documents, two steps compare, and the browser logs no error. tests/test_view_browser.py calls `walk` over
the fixture run; CI calls this module over a real rehearsal run. It drives Debian's /usr/bin/chromium through
Playwright and never downloads a browser.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from searchrl.view.app import create_app, serve_in_thread
from searchrl.view.listing import parse_filter
from searchrl.view.page import export_page
from searchrl.view.store import RunStore, Snapshot

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
INSTALL = "apt-get install -y chromium (Debian's browser) and pip install playwright (in the dev extra)"
CHECKS = ("curves", "filter", "episode", "compare", "refresh", "export")
TIMEOUT_MS = 20_000


def unavailable(chromium: str = CHROMIUM) -> str | None:
    """Why the walk cannot run on this machine, or None when it can."""
    if importlib.util.find_spec("playwright") is None:
        return f"playwright is not installed: {INSTALL}"
    if not Path(chromium).exists():
        return f"{chromium} is missing: {INSTALL}"
    return None


@contextmanager
def browser(chromium: str = CHROMIUM) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def watch(page: Any, errors: list[str], requests: list[str] | None = None) -> None:
    """Collect the page's console errors and uncaught exceptions (and, given a list, every URL it requests)."""
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    if requests is not None:
        page.on("request", lambda r: requests.append(r.url))


def narrowing_filter(snapshot: Snapshot) -> tuple[str, str, dict[str, str], int] | None:
    """A filter the page's form can set that keeps some episodes of all steps but not all: (field id, value, the
    API's parameters, the count the API's filter gives); None for a run no filter narrows (all alike)."""
    rewards = sorted(r.reward for r in snapshot.episodes)
    median = statistics.median(rewards)
    candidates = [
        ("#f-correct", "right", {"correct": "right"}),
        ("#f-violation", "any", {"violation": "any"}),
        ("#f-searches", "0", {"searches": "0"}),
        ("#f-min", f"{median:g}", {"min_reward": f"{median:g}"}),
    ]
    for field, value, params in candidates:
        found = len(parse_filter(dict(params), snapshot).apply(snapshot.episodes))
        if 0 < found < len(snapshot.episodes):
            return field, value, params, found
    return None


class Walk:
    """One page's checks, each recorded as {"ok", "detail"}: one that fails does not stop the others."""

    def __init__(self, page: Any, snapshot: Snapshot, out: Path, screenshots: list[str]) -> None:
        self.page = page
        self.snapshot = snapshot
        self.out = out
        self.screenshots = screenshots
        self.checks: dict[str, dict[str, Any]] = {}

    def run(self, name: str, check: Callable[[], str]) -> None:
        from playwright.sync_api import Error as PlaywrightError

        try:
            self.checks[name] = {"ok": True, "detail": check()}
        except (AssertionError, PlaywrightError) as e:
            self.checks[name] = {"ok": False, "detail": f"{type(e).__name__}: {str(e)[:600]}"}

    def shot(self, name: str) -> None:
        path = self.out / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        self.screenshots.append(str(path))

    def tab(self, name: str) -> None:
        self.page.click(f"button.tab[data-tab={name}]")

    def list_total(self, expected: int) -> None:
        self.page.wait_for_selector(f"#list-count[data-total='{expected}']")

    def curves(self, prefix: str) -> str:
        self.tab("curves")
        self.page.wait_for_selector("svg.plot path.line")
        paths = self.page.eval_on_selector_all("svg.plot path.line", "ps => ps.map(p => +p.dataset.points)")
        plots = self.page.locator("figure.plot-card").count()
        dots = self.page.locator("svg.plot circle.pt").count()
        steps = len(self.snapshot.summary.steps)
        assert plots >= 3 and paths and max(paths) >= min(2, steps), f"{plots} plots, points per line {paths}"
        assert dots >= steps, f"{dots} points drawn for {steps} steps"
        self.shot(f"{prefix}curves")
        return f"{plots} plots, {len(paths)} lines, {dots} points"

    def filter(self, prefix: str) -> str:
        self.tab("episodes")
        self.page.select_option("#f-step", "")
        total = len(self.snapshot.episodes)
        self.list_total(total)
        chosen = narrowing_filter(self.snapshot)
        if chosen is None:
            return f"all {total} episodes alike: no filter narrows this run"
        field, value, params, expected = chosen
        if self.page.locator(field).evaluate("e => e.tagName") == "SELECT":
            self.page.select_option(field, value)
        else:
            self.page.fill(field, value)
        self.list_total(expected)
        rows = self.page.locator("#episode-list tbody tr").count()
        assert rows == min(expected, 50), f"{rows} rows listed, the filter passes {expected}"
        self.shot(f"{prefix}episodes-filtered")
        self.page.click("#f-reset")
        self.list_total(total)
        return f"{params} narrowed {total} episodes to {expected}"

    def episode(self, prefix: str) -> str:
        self.tab("episodes")
        self.page.select_option("#f-step", "")
        self.page.select_option("#f-sort", "-searches")
        self.page.wait_for_selector("#list-count[data-sort='-searches']")
        row = self.page.locator("#episode-list tbody tr").first
        row.wait_for()
        episode_id, searches = row.get_attribute("data-id"), int(row.get_attribute("data-searches") or 0)
        row.click()
        self.page.wait_for_selector(f"#episode[data-id='{episode_id}'] #episode-turns .turn")
        components = self.page.locator("#episode-components tr").count()
        assert components > 0, "no reward components shown"
        documents = self.page.locator("#episode-turns details.documents")
        if searches == 0 or documents.count() == 0:
            assert searches == 0, f"episode {episode_id} made {searches} searches but shows no documents"
            self.shot(f"{prefix}episode")
            return f"episode {episode_id}: no episode of the run searched"
        documents.first.locator("summary").click()
        text = documents.first.locator("pre").inner_text()
        assert text.strip(), "the documents block opened empty"
        queries = self.page.locator("#episode-turns .seg.query").count()
        assert queries > 0, f"episode {episode_id} searched but no query is highlighted"
        stray = self.page.locator("#episode-turns .tag.stray").count()
        self.shot(f"{prefix}episode")
        self.page.select_option("#f-sort", "time")
        return (
            f"episode {episode_id}: {documents.count()} documents blocks, {queries} highlighted queries, "
            f"{stray} stray tags, {components} reward components"
        )

    def compare(self, prefix: str) -> str:
        steps = self.snapshot.summary.steps
        a, b = steps[0], steps[-1]
        self.tab("compare")
        self.page.select_option("#cmp-a", str(a))
        self.page.select_option("#cmp-b", str(b))
        self.page.wait_for_selector("#cmp-table tr[data-measure='searches / episode']")
        self.page.wait_for_selector("#cmp-episodes-a .cmp-episode")
        self.page.wait_for_selector("#cmp-episodes-b .cmp-episode")
        heads = self.page.locator("#cmp-table tr").first.inner_text()
        assert f"step {a}" in heads and f"step {b}" in heads, heads
        for measure in ("answer rate", "distinct queries", "reward (mean)"):
            assert self.page.locator(f"#cmp-table tr[data-measure='{measure}']").count() == 1, measure
        self.shot(f"{prefix}compare")
        cards = self.page.locator(".cmp-episode").count()
        return f"steps {a} and {b}: {self.page.locator('#cmp-table tr').count() - 1} measures, {cards} episodes"

    def refresh(self, grow: Callable[[], int]) -> str:
        self.tab("episodes")
        before = self.page.get_attribute("#status", "data-version")
        step = grow()
        self.page.wait_for_selector(f"#f-step option[value='{step}']", state="attached")
        after = self.page.get_attribute("#status", "data-version")
        assert after != before, f"version still {before}"
        self.shot("refreshed")
        return f"step {step} appeared (version {before} -> {after})"


def _served(
    launched: Any,
    snapshot: Snapshot,
    store: RunStore,
    out: Path,
    result: dict[str, Any],
    only: Collection[str],
    grow: Callable[[], int] | None,
) -> dict[str, dict[str, Any]]:
    app = create_app(store.run_dir, refresh_s=0.5, store=store)
    with serve_in_thread(app) as url:
        page = launched.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(TIMEOUT_MS)
        watch(page, result["console_errors"])
        page.goto(url + "/")
        page.wait_for_selector("body[data-ready='1']")
        walk = Walk(page, snapshot, out, result["screenshots"])
        for name in ("curves", "filter", "episode", "compare"):
            if name in only:
                walk.run(name, lambda name=name: getattr(walk, name)(""))
        if "refresh" in only and grow is not None:
            walk.run("refresh", lambda: walk.refresh(grow))
        page.close()
    return walk.checks


def _exported(launched: Any, snapshot: Snapshot, out: Path, result: dict[str, Any]) -> dict[str, Any]:
    path = out / "view-export.html"
    path.write_text(export_page(snapshot), encoding="utf-8")
    requests: list[str] = []
    page = launched.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    watch(page, result["console_errors"], requests)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']")
    walk = Walk(page, snapshot, out, result["screenshots"])
    for name in ("curves", "filter", "episode"):
        walk.run(name, lambda name=name: getattr(walk, name)("export-"))
    page.close()
    away = sorted({u for u in requests if not u.startswith(("file:", "data:"))})
    failed = [f"{n}: {c['detail']}" for n, c in walk.checks.items() if not c["ok"]]
    detail = f"{path}: " + ("; ".join(failed) if failed else ", ".join(c["detail"] for c in walk.checks.values()))
    if away:
        detail += f"; requested from elsewhere: {away[:5]}"
    return {"ok": not failed and not away, "detail": detail}


def walk(
    run_dir: Path,
    out: Path,
    chromium: str = CHROMIUM,
    grow: Callable[[], int] | None = None,
    only: Collection[str] = CHECKS,
) -> dict[str, Any]:
    """Every check over `run_dir` (those in `only`), screenshots under `out`; `grow` adds a step to the run and
    returns its number (the refresh check, for a run this walk may write to)."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(run_dir, min_check_s=0.25)
    snapshot = store.snapshot()
    result: dict[str, Any] = {
        "run_dir": str(run_dir),
        "episodes": len(snapshot.episodes),
        "steps": snapshot.summary.steps,
        "checks": {},
        "console_errors": [],
        "screenshots": [],
    }
    if not snapshot.episodes:
        result["checks"]["episodes"] = {"ok": False, "detail": f"{run_dir}: no episode records"}
    else:
        with browser(chromium) as launched:
            result["checks"] = _served(launched, snapshot, store, out, result, only, grow)
            if "export" in only:
                result["checks"]["export"] = _exported(launched, snapshot, out, result)
    result["ok"] = all(c["ok"] for c in result["checks"].values()) and not result["console_errors"]
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m searchrl.view.browser_check", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--out", type=Path, required=True, help="folder for the screenshots and the exported page")
    p.add_argument("--chromium", default=CHROMIUM, help=f"the browser to drive (default: {CHROMIUM})")
    args = p.parse_args(argv)
    if (why := unavailable(args.chromium)) is not None:
        print(json.dumps({"ok": False, "error": why}))
        return 2
    if not args.run_dir.is_dir():
        print(json.dumps({"ok": False, "error": f"{args.run_dir}: no such folder"}))
        return 2
    result = walk(args.run_dir, args.out, args.chromium)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
