"""What the Ray Serve fault rehearsal (searchrl/rehearsal/serve_faults.py) counts from Serve's proxies: their access
logs, lines recorded from Ray 2.55 in one of its runs (tests/fixtures/serve_proxy.log). The rehearsal itself runs in
CI's rehearsal lane: a two-node cluster is a minute and a half on 2 cores."""

from __future__ import annotations

import shutil

from searchrl.rehearsal.serve_faults import proxy_answers
from tests.conftest import FIXTURES


def test_proxy_statuses_are_counted_per_node(tmp_path) -> None:
    for node in ("srl-ray-a", "srl-ray-node-b"):
        logs = tmp_path / node / "session_2026" / "logs" / "serve"
        logs.mkdir(parents=True)
        shutil.copy(FIXTURES / "serve_proxy.log", logs / "proxy_127.0.0.1.log")
    kept = tmp_path / "kept"
    counts = proxy_answers([tmp_path / "srl-ray-a", tmp_path / "srl-ray-node-b"], kept)
    # Per node: six searches answered, two dropped by the killed replica, two 422 probes; start-up lines not counted.
    assert counts == {"200": 12, "422": 4, "500": 4}
    names = sorted(p.name for p in kept.iterdir())
    assert names == ["srl-ray-a_proxy_127.0.0.1.log", "srl-ray-node-b_proxy_127.0.0.1.log"]
