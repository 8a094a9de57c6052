"""`searchrl view`: the JSON API over a real uvicorn server on loopback (filters, an episode's turns, 400/401/404),
a run that grows while served, the exported page, and the command line.

The expected counts are worked out here from the fixture's raw JSON lines, not through the viewer's own code.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from searchrl.episodes.record import EpisodeRecord
from searchrl.process import free_port, searchrl_command, start_command, stop
from searchrl.view import app as view_app
from searchrl.view import browser_check
from searchrl.view.app import create_app
from searchrl.view.page import script_hash
from searchrl.view.summary import is_right
from tests.conftest import FIXTURES, serve

RUN = FIXTURES / "view_run"


def raw_records(run: Path = RUN) -> list[dict]:
    return [json.loads(line) for f in sorted((run / "episodes").glob("*.jsonl")) for line in f.open()]


def broke(r: dict) -> list[str]:
    return sorted(k.removeprefix("violation_") for k, v in r["components"].items() if k.startswith("violation_") and v)


@pytest.fixture(scope="module")
def url():
    with serve(create_app(RUN, refresh_s=0.2)) as base:
        yield base


def get(url: str, path: str, **params) -> httpx.Response:
    return httpx.get(url + path, params=params, timeout=30)


def total(url: str, **params) -> int:
    r = get(url, "/api/episodes", **params)
    assert r.status_code == 200, r.text
    return r.json()["total"]


def test_summary_steps_aggregates_and_both_sources(url):
    raw = raw_records()
    s = get(url, "/api/summary").json()
    assert s["steps"] == [1, 2, 3] and s["episodes"] == len(raw) == 18 and s["has_tensorboard"]
    by_step = {x["step"]: x for x in s["step_summaries"]}
    for step in (1, 2, 3):
        rows = [r for r in raw if r["step"] == step]
        assert by_step[step]["reward_mean"] == pytest.approx(sum(r["reward"] for r in rows) / len(rows))
        assert by_step[step]["searches_mean"] == pytest.approx(
            sum(r["components"]["num_searches"] for r in rows) / len(rows)
        )
        assert by_step[step]["answer_rate"] == pytest.approx(sum(r["answer"] is not None for r in rows) / len(rows))
    assert by_step[1]["violation_rates"]["answer_too_long"] == pytest.approx(1 / 6)
    plots = {p["measure"]: p for p in s["plots"]}
    assert {"reward", "score", "format_ok", "num_searches", "response_tokens", "violations"} <= set(plots)
    assert [x["source"] for x in plots["reward"]["series"]] == ["episodes", "tensorboard"]
    assert "TensorBoard" in plots["reward"]["title"] and "episodes" in plots["reward"]["title"]
    assert [x["source"] for x in plots["response_tokens"]["series"]] == ["episodes"]
    fired = {x["label"] for x in plots["violations"]["series"]}
    assert fired == {"any rule", "answer_too_long", "forged_documents", "tag_counts", "tags_in_answer"}
    assert get(url, "/api/step/2").json()["episodes"] == 6


def test_each_filter_narrows_to_the_matching_episodes(url):
    raw = raw_records()
    cases = [
        ({"step": "1"}, [r for r in raw if r["step"] == 1]),
        ({"violation": "any"}, [r for r in raw if broke(r)]),
        ({"violation": "none"}, [r for r in raw if not broke(r)]),
        ({"violation": "forged_documents"}, [r for r in raw if "forged_documents" in broke(r)]),
        ({"searches": "0"}, [r for r in raw if r["components"]["num_searches"] == 0]),
        ({"searches": "2+"}, [r for r in raw if r["components"]["num_searches"] >= 2]),
        ({"correct": "right"}, [r for r in raw if r["components"]["em"] > 0]),
        ({"correct": "wrong"}, [r for r in raw if r["components"]["em"] == 0]),
        ({"min_reward": "0.5"}, [r for r in raw if r["reward"] >= 0.5]),
        ({"max_reward": "-1"}, [r for r in raw if r["reward"] <= -1]),
        ({"q": "DRACULA"}, [r for r in raw if "dracula" in (r["prompt"] + r["solution"]).lower()]),
        ({"step": "2", "correct": "right"}, [r for r in raw if r["step"] == 2 and r["components"]["em"] > 0]),
    ]
    for params, expected in cases:
        assert 0 < len(expected) < len(raw), params  # each case must narrow, or it proves nothing
        page = get(url, "/api/episodes", **params).json()
        assert page["total"] == len(expected), params
        assert {e["id"] for e in page["episodes"]} == {r["id"] for r in expected}, params


def test_sort_and_pages(url):
    rewards = [e["reward"] for e in get(url, "/api/episodes", sort="-reward").json()["episodes"]]
    assert rewards == sorted(rewards, reverse=True) and rewards[0] > rewards[-1]
    whole = [e["id"] for e in get(url, "/api/episodes").json()["episodes"]]
    pages = [get(url, "/api/episodes", limit="5", offset=str(o)).json() for o in range(0, 18, 5)]
    assert [e["id"] for p in pages for e in p["episodes"]] == whole and len(whole) == 18
    assert all(p["total"] == 18 for p in pages) and len(pages[-1]["episodes"]) == 3


def test_an_episode_comes_back_as_its_turns_with_documents(url):
    record = next(r for r in raw_records() if len(r["queries"]) == 2)
    e = get(url, f"/api/episode/{record['id']}").json()
    turns = e["turns"]
    assert [t["query"] for t in turns if t["documents"]] == record["queries"]
    assert (
        all(t["documents"].startswith("<|begin_of_documents|>") for t in turns[:2]) and turns[2]["documents"] is None
    )
    assert "".join(t["text"] + (t["documents"] or "") for t in turns) == record["solution"]
    assert e["components"] == record["components"] and e["gold"] == record["gold"] and e["right"] is True
    assert e["prompt_tail"].endswith("?") and "Assistant" not in e["prompt_tail"]


@pytest.mark.parametrize(
    "params,field",
    [
        ({"min_reward": "abc"}, "min_reward"),
        ({"min_reward": "nan"}, "min_reward"),
        ({"min_reward": "1", "max_reward": "0"}, "min_reward"),
        ({"violation": "made_up"}, "violation"),
        ({"searches": "two"}, "searches"),
        ({"correct": "maybe"}, "correct"),
        ({"sort": "length"}, "sort"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"step": "1.5"}, "step"),
    ],
)
def test_a_bad_filter_is_400_naming_it(url, params, field):
    r = get(url, "/api/episodes", **params)
    assert r.status_code == 400 and r.json()["field"] == field, r.text


def test_unknown_episode_or_step_is_404(url):
    r = get(url, "/api/episode/nope")
    assert r.status_code == 404 and "no episode 'nope'" in r.json()["detail"]
    r = get(url, "/api/episodes", step="9")
    assert r.status_code == 404 and "steps 1 to 3" in r.json()["detail"]
    assert get(url, "/api/step/9").status_code == 404


def test_the_page_is_served_with_its_script_allowed_by_hash(url):
    r = get(url, "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    policy = r.headers["content-security-policy"]
    script = re.search(r"<script>(.*)</script>", r.text, re.S).group(1)
    assert f"'{script_hash(script)}'" in policy and "connect-src 'self'" in policy and "frame-ancestors" in policy
    assert '"mode":"server"' in r.text and 'searchrl-data">null<' in r.text


def test_bearer_token_guards_the_api_not_the_page():
    with serve(create_app(RUN, token="s3cret")) as base:
        assert httpx.get(base + "/api/summary").status_code == 401
        wrong = httpx.get(base + "/api/summary", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["field"] == "Authorization"
        ok = httpx.get(base + "/api/episodes", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["total"] == 18
        page = httpx.get(base + "/")
        # The page holds no data: it asks for the token and sends it to the API.
        assert page.status_code == 200 and raw_records()[0]["id"] not in page.text


def step_line(run: Path, step: int) -> tuple[str, str]:
    """A copy of the run's last episode as step `step`: its id and its JSON line."""
    last = raw_records(run)[-1]
    record = dict(last, id=f"grown{step:04d}", step=step, time=last["time"] + 500)
    return record["id"], json.dumps(record) + "\n"


def poll(base: str, until, timeout_s: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        summary = httpx.get(base + "/api/summary").json()
        if until(summary) or time.monotonic() > deadline:
            return summary
        time.sleep(0.1)


def test_a_growing_run_shows_the_new_step_and_rereads_only_what_changed(tmp_path):
    run = shutil.copytree(RUN, tmp_path / "run")
    app = create_app(run, refresh_s=0.2)
    with serve(app) as base:
        store = app.state.store
        first = httpx.get(base + "/api/summary").json()
        assert first["steps"] == [1, 2, 3] and store.files_read == 3
        time.sleep(0.3)
        assert httpx.get(base + "/api/summary").json()["version"] == first["version"] and store.files_read == 3

        grown_id, line = step_line(run, 4)
        new_file = run / "episodes" / "step_000004.jsonl"
        # A writer caught mid-line: half a record, then the rest.
        new_file.write_text(line[: len(line) // 2])
        torn = poll(base, lambda s: s["version"] != first["version"])
        assert torn["steps"] == [1, 2, 3] and list(torn["skipped"].values()) == [1], torn["skipped"]
        with new_file.open("a") as fh:
            fh.write(line[len(line) // 2 :])
        grown = poll(base, lambda s: s["steps"] == [1, 2, 3, 4])
        assert grown["steps"] == [1, 2, 3, 4] and grown["skipped"] == {} and grown["episodes"] == 19
        # Only the new file was parsed, once torn and once whole; the three old ones were not read again.
        assert store.files_read == 5
        assert httpx.get(base + f"/api/episode/{grown_id}").json()["step"] == 4
        assert httpx.get(base + "/api/episodes", params={"step": "4"}).json()["total"] == 1


class _Loads(HTMLParser):
    """Every URL an element would load (src, href, and url(...) in style), and the JSON data block."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "action", "poster", "data")]
        if tag == "script":
            self.scripts.append(dict(attrs))


def test_export_is_one_self_contained_file(tmp_path, capsys):
    run = shutil.copytree(RUN, tmp_path / "run")
    # A record whose text would close the script element and run its own, if the embedding let it.
    planted = raw_records(run)[0] | {"id": "planted", "answer": "</script><script>alert(1)</script><!--"}
    with (run / "episodes" / "step_000001.jsonl").open("a") as fh:
        fh.write(json.dumps(planted) + "\n")
    out = tmp_path / "view.html"
    assert view_app.main([str(run), "--export", str(out)]) == 0
    assert "19 episodes" in capsys.readouterr().out
    text = out.read_text(encoding="utf-8")
    parsed = _Loads()
    parsed.feed(text)
    assert [u for u in parsed.urls if u not in ("data:,",)] == [], parsed.urls
    # The page itself (the run's texts aside, which may quote any URL) names no address but SVG's namespace.
    page = re.sub(r'(id="searchrl-data">).*?(</script>)', r"\1\2", text, flags=re.S)
    assert not re.search(r"url\(|@import|https?://(?!www\.w3\.org/2000/svg\b)", page), "the page loads from elsewhere"
    assert [s.get("type") for s in parsed.scripts] == ["application/json", "application/json", None]
    assert "connect-src 'none'" in text
    data = json.loads(re.search(r'id="searchrl-data">(.*?)</script>', text, re.S).group(1))
    assert {e["id"] for e in data["episodes"]} == {r["id"] for r in raw_records(run)}
    assert next(e for e in data["episodes"] if e["id"] == "planted")["answer"] == planted["answer"]
    assert data["summary"]["steps"] == [1, 2, 3] and data["summary"]["plots"]


def test_a_run_without_episodes_says_where_it_looked(tmp_path, capsys):
    assert view_app.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}/**/episodes/*.jsonl" in err and "episodes.per_step" in err
    assert view_app.main([str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert view_app.main([str(RUN), "--token-env", "SEARCHRL_VIEW_TEST_UNSET"]) == 2
    assert "$SEARCHRL_VIEW_TEST_UNSET is not set" in capsys.readouterr().err


def test_searchrl_view_serves_and_prints_its_url(tmp_path, monkeypatch):
    monkeypatch.setenv("SEARCHRL_VIEW_TEST_TOKEN", "tok")
    port = free_port()
    log = tmp_path / "view.log"
    proc = start_command(searchrl_command("view", str(RUN), "--token-env", "SEARCHRL_VIEW_TEST_TOKEN"), port, log)
    try:
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(base + "/api/summary").status_code == 401
        ok = httpx.get(base + "/api/summary", headers={"Authorization": "Bearer tok"})
        assert ok.status_code == 200 and ok.json()["steps"] == [1, 2, 3]
    finally:
        stop(proc)
    assert f"http://127.0.0.1:{port}/" in log.read_text()


def test_right_reads_em_then_cem_then_score():
    def record(components: dict[str, float], score: float | None) -> EpisodeRecord:
        fields = {"time": 0, "source": "train", "protocol": "r1-searcher", "prompt": "p", "solution": "s"}
        return EpisodeRecord(**fields, reward=0, score=score, components=components)

    # A stuffed answer: cover-EM holds, exact match does not; the answer is not right.
    assert is_right(record({"em": 0.0, "cem": 1.0}, 1.0)) is False
    assert is_right(record({"cem": 1.0}, 0.0)) is True
    assert is_right(record({}, 0.5)) is True and is_right(record({}, 0.0)) is False
    assert is_right(record({}, None)) is None


def test_a_missing_browser_is_named_with_its_install():
    why = browser_check.unavailable("/nonexistent/chromium")
    assert why is not None and "/nonexistent/chromium is missing" in why and "apt-get install -y chromium" in why
