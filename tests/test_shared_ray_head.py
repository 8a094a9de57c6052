"""The Ray head CI's lanes share: a real `ray start` kept up by `python -m searchrl.rehearsal.ray_head`, two jobs
submitted to it one after the other as the rehearsals submit theirs, and everything it started gone on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from searchrl.paths import ROOT
from searchrl.rehearsal.ray_head import BLOCKS_DIR, HEAD_ENV, SharedHead, open_head


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 420.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.is_file():
        assert proc.poll() is None, f"the head exited with {proc.returncode}"
        assert time.monotonic() < deadline, "no descriptor within the timeout"
        time.sleep(0.5)


def test_rehearsals_share_one_head_and_it_stops_on_sigterm(tmp_path, monkeypatch):
    descriptor = tmp_path / "head" / "head.json"
    cmd = [sys.executable, "-m", "searchrl.rehearsal.ray_head", "--descriptor", str(descriptor), "--num-cpus", "2"]
    serve = subprocess.Popen([*cmd, "--num-gpus", "1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for(descriptor, serve)
        d = json.loads(descriptor.read_text())
        monkeypatch.setenv(HEAD_ENV, str(descriptor))
        head = open_head(tmp_path, num_cpus=2, num_gpus=1)
        assert isinstance(head, SharedHead) and head.address == d["address"]
        head.wait()
        with pytest.raises(RuntimeError, match="needs 4 and 0"):
            open_head(tmp_path, num_cpus=4)
        ray = str(Path(sys.executable).parent / "ray")
        entry = ["python", "-c", "import ray; ray.init(); print('gpus', ray.cluster_resources().get('GPU'))"]
        for _ in range(2):
            job = subprocess.run(
                [ray, "job", "submit", "--address", head.address, "--", *entry],
                env=head.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert job.returncode == 0 and "gpus 1.0" in job.stdout, job.stdout[-2000:] + job.stderr[-2000:]
            head.stop()  # a rehearsal's stop leaves the shared head up for the next one
            assert httpx.get(f"{head.address}/api/version", timeout=5).status_code == 200
        ray_pids = [d["pid"], *head.descendants()]
        assert len(ray_pids) > 3  # the GCS, the raylet, the dashboard ...
    finally:
        serve.send_signal(signal.SIGTERM)
        out = serve.communicate(timeout=120)[0].decode(errors="replace")
    assert serve.returncode == 0, out[-2000:]
    assert not descriptor.exists()
    for pid in ray_pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert not (BLOCKS_DIR / str(d["first_port"])).exists()  # its port block is free for the next head


def test_a_descriptor_that_is_not_one_is_refused_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(HEAD_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(RuntimeError, match=f"\\${HEAD_ENV}=.*missing.json.*unset it"):
        open_head(tmp_path)
    (tmp_path / "half.json").write_text(json.dumps({"address": "http://127.0.0.1:1"}))
    monkeypatch.setenv(HEAD_ENV, str(tmp_path / "half.json"))
    with pytest.raises(RuntimeError, match="not a running head's descriptor"):
        open_head(tmp_path)
    monkeypatch.delenv(HEAD_ENV)
    assert os.environ.get(HEAD_ENV) is None
