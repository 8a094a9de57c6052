"""Training-health curves read back from real TensorBoard event files, and the collapse flags."""

import json
import subprocess
import sys

from torch.utils.tensorboard import SummaryWriter

from tests.conftest import ROOT


def write_run(logdir, format_ok, searched):
    writer = SummaryWriter(str(logdir))
    for step, (f, s) in enumerate(zip(format_ok, searched, strict=True)):
        writer.add_scalar("train/format_ok", f, step)
        writer.add_scalar("train/searched", s, step)
        writer.add_scalar("train/violation_think", 1 - f, step)
        writer.add_scalar("train/num_searches", 2 * s, step)
    writer.close()


def health(logdir, *args):
    return subprocess.run(
        [sys.executable, "-m", "searchrl.health", str(logdir), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_healthy_run_is_not_flagged(tmp_path):
    write_run(tmp_path, [0.2 + 0.02 * i for i in range(40)], [min(1.0, 0.05 * i) for i in range(40)])
    out = health(tmp_path, "--json", "--png", str(tmp_path / "health.png"))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["flags"] == [] and report["signals"]["searched"]["steps"] == 40
    assert "violation_think" in report["signals"]
    assert (tmp_path / "health.png").read_bytes()[:4] == b"\x89PNG"


def test_collapse_is_flagged(tmp_path):
    format_ok = [0.9] * 30 + [0.3] * 15
    searched = [0.8] * 30 + [0.0] * 15
    write_run(tmp_path, format_ok, searched)
    out = health(tmp_path)
    assert out.returncode == 3
    assert "FLAG: format collapse" in out.stdout and "FLAG: search collapse" in out.stdout


def test_no_event_files(tmp_path):
    out = health(tmp_path)
    assert out.returncode == 2 and "no TensorBoard event files" in out.stderr
