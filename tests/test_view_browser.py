"""`searchrl view` in headless Chromium over the fixture run: the walk of searchrl/view/browser_check.py (the one CI
runs over a real rehearsal run), with a step added while the page is open. Screenshots: runs/test-output/view/.

Without /usr/bin/chromium or playwright the tests skip, naming the install; with SEARCHRL_REQUIRE_BROWSER=1 (CI)
they fail instead, so a CI image that lost its browser cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from searchrl.paths import RUNS
from searchrl.view import browser_check, page
from searchrl.view.app import create_app, serve_in_thread
from tests.conftest import FIXTURES

RUN = FIXTURES / "view_run"
OUT = RUNS / "test-output" / "view"


@pytest.fixture(autouse=True)
def chromium_here() -> None:
    why = browser_check.unavailable()
    if why is None:
        return
    if os.environ.get("SEARCHRL_REQUIRE_BROWSER") == "1":
        pytest.fail(f"SEARCHRL_REQUIRE_BROWSER=1 and {why}")
    pytest.skip(why)


def grower(run: Path):
    """Adds step 4 (a copy of the run's last episode) to `run`, as a live run writes its next step."""

    def grow() -> int:
        last = json.loads((run / "episodes" / "step_000003.jsonl").read_text().splitlines()[-1])
        record = dict(last, id="grown0004", step=4, time=last["time"] + 500)
        (run / "episodes" / "step_000004.jsonl").write_text(json.dumps(record) + "\n")
        return 4

    return grow


def test_the_page_walks_served_and_exported(tmp_path):
    run = shutil.copytree(RUN, tmp_path / "run")
    shutil.rmtree(OUT, ignore_errors=True)
    result = browser_check.walk(run, OUT, grow=grower(run))
    shown = json.dumps(result, indent=1)
    assert set(result["checks"]) == set(browser_check.CHECKS), shown
    failed = {name: c["detail"] for name, c in result["checks"].items() if not c["ok"]}
    assert not failed, shown
    assert result["console_errors"] == [], shown
    checks = result["checks"]
    # What each check saw on this run, so a check that passed by finding nothing fails here.
    assert "narrowed 18 episodes to 11" in checks["filter"]["detail"], shown
    # The episode that searched most: two documents blocks, both queries highlighted, its think closed in place.
    assert "2 documents blocks, 2 highlighted queries, 0 stray tags" in checks["episode"]["detail"], shown
    assert checks["compare"]["detail"].startswith("steps 1 and 3"), shown
    assert checks["refresh"]["detail"].startswith("step 4 appeared"), shown
    assert "requested from elsewhere" not in checks["export"]["detail"], shown
    assert "narrowed 18 episodes to 11" in checks["export"]["detail"], shown
    names = {Path(p).name for p in result["screenshots"]}
    assert {"curves.png", "episode.png", "compare.png", "refreshed.png", "export-episode.png"} <= names, names
    assert all(Path(p).stat().st_size > 10_000 for p in result["screenshots"])


def test_the_walk_fails_on_an_error_in_the_page(tmp_path, monkeypatch):
    """The walk's own check: a script that throws must fail it, or "no error in the console" proves nothing."""
    read = page._static

    def planted(name: str) -> str:
        return read(name) + ('\nthrow new Error("planted");\n' if name == "page.js" else "")

    monkeypatch.setattr(page, "_static", planted)
    result = browser_check.walk(RUN, tmp_path / "out", only=("curves",))
    assert result["checks"]["curves"]["ok"] and not result["ok"]
    assert any("planted" in e for e in result["console_errors"]), result["console_errors"]


def test_browser_check_main_prints_one_json_line(tmp_path, capsys):
    assert browser_check.main([str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert json.loads(capsys.readouterr().out)["error"].endswith("no such folder")


def test_the_page_takes_the_token_from_its_address_or_asks(tmp_path):
    with serve_in_thread(create_app(RUN, token="s3cret")) as url, browser_check.browser() as launched:
        errors: list[str] = []
        page = launched.new_page()
        browser_check.watch(page, errors)
        page.goto(url + "/#token=s3cret")
        page.wait_for_selector("body[data-ready='1']")
        assert page.locator("svg.plot path.line").count() > 0 and errors == []
        assert "s3cret" not in page.url  # the token does not stay in the address bar (or its history)

        asking = launched.new_page()
        browser_check.watch(asking, errors)
        asking.goto(url + "/")
        asking.wait_for_selector("#auth:not([hidden])")
        assert asking.locator("svg.plot").count() == 0
        asking.fill("#auth-token", "s3cret")
        asking.click("#auth button")
        asking.wait_for_selector("svg.plot path.line")
        # The one error: the browser's own report of the refused first call.
        assert [e for e in errors if "401" not in e] == [], errors
