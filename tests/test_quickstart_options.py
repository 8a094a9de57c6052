"""The quickstart's CPU demo honours episode.* and reward.* overrides and refuses the rest, before any work."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import ROOT


def quickstart():
    spec = importlib.util.spec_from_file_location("quickstart_cli", ROOT / "launch/quickstart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "override, named",
    [
        ("openrlhf.rollout.n_samples_per_prompt=8", "openrlhf.rollout.n_samples_per_prompt=8"),
        ("search.urls=http://10.0.0.1:8002", "search.urls"),
        ("model=configs/models/llama3.1-8b-instruct.yaml", "model="),
    ],
)
def test_cpu_demo_refuses_what_it_cannot_honour(tmp_path, capsys, override, named):
    code = quickstart().main(["--cpu", "--out", str(tmp_path), "reward.process_weight=0.5", override])
    err = capsys.readouterr().err
    assert code == 2 and named in err and "episode.* and reward.*" in err
    assert not (tmp_path / "index").exists()  # refused before any work


def test_cpu_demo_checks_honoured_overrides(tmp_path, capsys):
    code = quickstart().main(["--cpu", "--out", str(tmp_path), "episode.max_queries_per_block=99"])
    assert code == 2 and "episode.max_queries_per_block" in capsys.readouterr().err
