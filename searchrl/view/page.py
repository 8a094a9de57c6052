"""The page: one HTML file with its style and script inlined, served by the app and written whole by `--export`.

The script is allowed by its hash alone (Content-Security-Policy), and nothing may be fetched but the app's own
API (`connect-src 'self'`; none at all in an export): a page that showed a model's text can load nothing from
anywhere, and one that tried would fail loudly in the browser's console.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from functools import cache
from importlib.resources import files
from typing import Any

from searchrl.view.listing import detail_of
from searchrl.view.store import Snapshot

# The CSP meta element cannot carry frame-ancestors (browsers warn), so the served page adds it as a header.
FRAME_POLICY = "frame-ancestors 'none'"


@cache
def _static(name: str) -> str:
    return files("searchrl.view").joinpath("static", name).read_text(encoding="utf-8")


def script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def content_policy(script: str, exported: bool) -> str:
    connect = "'none'" if exported else "'self'"
    return (
        f"default-src 'none'; script-src '{script_hash(script)}'; style-src 'unsafe-inline'; img-src data:; "
        f"connect-src {connect}; base-uri 'none'; form-action 'none'"
    )


def served_policy() -> str:
    return content_policy(_static("page.js"), exported=False) + "; " + FRAME_POLICY


def embedded_json(value: Any) -> str:
    """JSON safe inside a <script> element: every `<` escaped, so no text of a record can close the element."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def render_page(title: str, refresh_s: float | None, data: dict[str, Any] | None = None) -> str:
    """The page; with `data` ({summary, episodes}) a file that shows that run with no server."""
    script = _static("page.js")
    exported = data is not None
    config = {"mode": "export" if exported else "server", "refresh_s": refresh_s}
    # The data goes in last, so no marker inside a record's text is ever replaced.
    page = (
        _static("page.html")
        .replace("@@CSP@@", html.escape(content_policy(script, exported), quote=False).replace('"', "&quot;"))
        .replace("@@TITLE@@", html.escape(f"searchrl view · {title}"))
        .replace("@@STYLE@@", _static("page.css"))
        .replace("@@CONFIG@@", embedded_json(config))
        .replace("@@SCRIPT@@", script)
    )
    return page.replace("@@DATA@@", embedded_json(data) if exported else "null")


def export_data(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "summary": snapshot.summary.model_dump(mode="json"),
        "episodes": [detail_of(r).model_dump(mode="json") for r in snapshot.episodes],
    }


def export_page(snapshot: Snapshot) -> str:
    return render_page(str(snapshot.run.run_dir), None, export_data(snapshot))
