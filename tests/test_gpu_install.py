"""The GPU install's dry run (launch/gpu_install), offline: its steps come from launch/install_gpu.sh alone and the
docs show the same commands; a fake pip (tests/fakes_pip.py) plays the index, so each way a step can fail is
reported with the step, pip's reason and the fix. The real resolution against PyPI is a CI step of its own."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from launch.gpu_install import check, sources
from launch.gpu_install.pip import Target, pip_reason
from launch.gpu_install.steps import SCRIPT, StepError, doc_commands, read_steps
from searchrl.paths import ROOT

FAKE_PIP = f"{sys.executable} {ROOT / 'tests' / 'fakes_pip.py'}"
TORCH = Version(importlib.metadata.version("torch")).public  # this machine's torch stands in for the GPU build
FLASH_SETUP = """import os
from packaging.version import parse
from setuptools import setup
from wheel.bdist_wheel import bdist_wheel
import torch

def jobs():
    import psutil
    return psutil.cpu_count()

setup(name="flash_attn", setup_requires=["packaging", "psutil", "ninja"])
"""
DEEPSPEED_SETUP = """from setuptools import setup
try:
    import torch
except ImportError:
    torch = None
from op_builder import ALL_OPS
setup(name="deepspeed")
"""
CONFLICT = """Collecting vllm==0.29.0
ERROR: Cannot install vllm==0.29.0 because these package versions have conflicting dependencies.

The conflict is caused by:
    vllm 0.29.0 depends on torch==2.13.0
    The user requested (constraint) torch==2.12.0

To fix this you could try to:
1. loosen the range of package versions you've specified
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


def item(name: str, version: str, requires: tuple[str, ...] = (), url: str | None = None, sha: str = "") -> dict:
    url = url or f"https://files.example/{name.replace('-', '_')}-{version}-py3-none-manylinux_2_17_x86_64.whl"
    info: dict = {"url": url}
    if sha:
        info["archive_info"] = {"hashes": {"sha256": sha}}
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}, "download_info": info}


def sdist(folder: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> dict:
    """A real .tar.gz served by file:// URL, as pip's report names an sdist."""
    base = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in {"PKG-INFO": f"Name: {name}\n", **files}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{base}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return item(name, version, requires, url=path.as_uri(), sha=hashlib.sha256(path.read_bytes()).hexdigest())


def torch_step(*extra: dict, cuda: bool = True, torch: str = TORCH) -> list[dict]:
    """Step 1's report: PyPI's torch pins its CUDA runtime (cuda-toolkit==13.0.3), a CPU build pins none."""
    requires = ("setuptools", "sympy", *(['cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"'] if cuda else []))
    url = f"https://f/torch-{torch}-cp311-cp311-manylinux_2_28_x86_64.whl"
    found = [item("torch", torch, requires, url=url), item("sympy", "1.14.0"), item("setuptools", "80.9.0")]
    found += [item("wheel", "0.45.1"), item("packaging", "25.0"), item("psutil", "7.0.0"), item("ninja", "1.13.0")]
    runtime = [item("cuda-toolkit", "13.0.3"), item("nvidia-cuda-runtime", "13.0.96")] if cuda else []
    return [*found, *runtime, *extra]


def no_wheel(name: str) -> list[dict]:
    return [{"rc": 1, "output": f"ERROR: No matching distribution found for {name}"}]


def source_scenario(tmp_path: Path, flash_setup: str = FLASH_SETUP) -> dict:
    flash = sdist(tmp_path, "flash-attn", "2.8.3", {"setup.py": flash_setup}, ("torch", "einops"))
    deepspeed = sdist(tmp_path, "deepspeed", "0.19.6", {"setup.py": DEEPSPEED_SETUP, "op_builder/__init__.py": ""})
    return {
        "1-torch": [{"install": torch_step()}],
        "2-sources-wheel-flash-attn": no_wheel("flash-attn==2.8.3"),
        "2-sources-wheel-deepspeed": no_wheel("deepspeed==0.19.6"),
        "2-sources-metadata": [{"install": [flash, deepspeed]}],
        "2-sources": [
            {"install": [item("flash-attn", "2.8.3"), item("deepspeed", "0.19.6"), item("einops", "0.8.1")]}
        ],
    }


def write_script(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "install_gpu.sh"
    path.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_check(tmp_path: Path, monkeypatch, capsys, scenario: dict, script: Path = SCRIPT, *extra: str):
    """The check against the fake pip: (exit code, stdout, stderr, every pip call's argv and CUDA_HOME)."""
    (tmp_path / "scenario.json").write_text(json.dumps(scenario), encoding="utf-8")
    monkeypatch.setenv("FAKE_PIP_SCENARIO", str(tmp_path / "scenario.json"))
    monkeypatch.setenv("FAKE_PIP_CALLS", str(tmp_path / "calls.jsonl"))
    argv = ["--pip", FAKE_PIP, "--script", str(script), "--out", str(tmp_path / "out"), *extra]
    code = check.main(argv)
    out = capsys.readouterr()
    calls_file = tmp_path / "calls.jsonl"
    calls = [json.loads(line) for line in calls_file.read_text().splitlines()] if calls_file.exists() else []
    return code, out.out, out.err, calls


def call_for(calls: list[dict], label: str) -> dict:
    return next(
        c
        for c in calls
        if "--report" in c["argv"] and c["argv"][c["argv"].index("--report") + 1].endswith(f"/{label}.json")
    )


# The steps: one source of truth, shown as is in the docs.


def test_the_steps_are_read_from_the_install_script():
    steps = read_steps(SCRIPT)
    assert [s.name for s in steps] == ["torch", "sources", "searchrl", "faiss-gpu"]
    torch, built, project, faiss = steps
    assert torch.pins()["torch"] == "2.13.0" and {"wheel", "setuptools", "packaging", "psutil", "ninja"} <= set(
        torch.requirements
    )
    # ${FLASH_ATTN_WHEEL:-flash-attn==2.8.3}: the user may give a wheel; the check resolves the default.
    assert built.no_build_isolation and built.pins() == {"flash-attn": "2.8.3", "deepspeed": "0.19.6"}
    assert project.requirements == [".[train,gpu]"] and faiss.no_deps and "--force-reinstall" in faiss.args


def test_the_source_pins_are_openrlhfs_and_the_faiss_step_is_the_gpu_extra():
    """flash-attn and DeepSpeed are built at OpenRLHF's exact pins (else step 3 would replace them), and the last
    step reinstalls exactly what pyproject's `gpu` extra asks for."""
    pins = read_steps(SCRIPT)[1].pins()
    openrlhf = {Requirement(r).name: str(Requirement(r).specifier) for r in importlib.metadata.requires("openrlhf")}
    assert openrlhf["flash-attn"] == f"=={pins['flash-attn']}" and openrlhf["deepspeed"] == f"=={pins['deepspeed']}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert read_steps(SCRIPT)[3].requirements == extras["gpu"]


def test_docs_show_the_scripts_steps():
    """docs/TRAINING.md lists the script's pip commands in order (quoting aside), so the two cannot drift."""
    want = [["pip", "install", *s.args] for s in read_steps(SCRIPT)]
    shown = doc_commands((ROOT / "docs" / "TRAINING.md").read_text(encoding="utf-8"))
    runs = [shown[i : i + len(want)] for i in range(len(shown) - len(want) + 1)]
    assert want in runs, "docs/TRAINING.md should show, in one block:\n" + "\n".join(s.command for s in read_steps())


def test_the_readme_installs_through_the_script():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    gpu = text.split("## Train on GPUs", 1)[1].split("\n## ", 1)[0]
    assert "bash launch/install_gpu.sh" in gpu
    assert not [c for c in doc_commands(gpu) if c[:2] == ["pip", "install"]], "a bare pip install of the GPU extras"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("step a pip install --pre torch", "option --pre is not one the dry run knows"),
        ("step a pip install $TORCH", "a shell variable without a default"),
        ("step a python -m pip install torch", "expected `pip install ...`"),
        ("step a pip install --no-deps", "no requirement to install"),
    ],
)
def test_a_step_the_check_cannot_read_is_refused_by_line(tmp_path, line, message):
    with pytest.raises(StepError, match=re.escape(message)) as e:
        read_steps(write_script(tmp_path, "echo hi", line))
    assert str(e.value).startswith("install_gpu.sh:4: ")


def test_two_steps_of_one_name_are_refused(tmp_path):
    with pytest.raises(StepError, match="step a appears twice"):
        read_steps(write_script(tmp_path, "step a pip install x", "step a pip install y"))


def test_the_check_runs_as_a_script():
    """As CI runs it: `python launch/check_gpu_install.py` from the checkout's root (its folder first on sys.path)."""
    done = subprocess.run(
        [sys.executable, "launch/check_gpu_install.py", "--steps"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.splitlines() == [s.command for s in read_steps(SCRIPT)], done.stderr


def test_help_and_steps_run_without_pip(capsys):
    assert check.main(["--steps"]) == 0
    assert capsys.readouterr().out.splitlines() == [s.command for s in read_steps(SCRIPT)]
    with pytest.raises(SystemExit) as e:
        check.main(["--help"])
    assert e.value.code == 0 and "pip install --dry-run --report per step" in " ".join(capsys.readouterr().out.split())


# The dry run against a fake pip.


def test_the_real_steps_resolve_in_order_with_earlier_pins_held(tmp_path, monkeypatch, capsys):
    scenario = source_scenario(tmp_path)
    scenario["3-searchrl"] = [
        {
            "install": [
                item("searchrl", "0.1.0", url=(ROOT.as_uri())),
                item("vllm", "0.29.0", ("torch==2.13.0",)),
                item("openrlhf", "0.11.2", ("flash-attn==2.8.3", "deepspeed==0.19.6")),
                item("faiss-cpu", "1.15.1"),
                item("numpy", "2.3.5"),
                item("nvidia-cuda-runtime-cu12", "12.9.79"),
                item(
                    "cryptography", "50.0.2", url="https://f/cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl"
                ),
            ]
        }
    ]
    scenario["4-faiss-gpu"] = [
        {"install": [item("faiss-gpu", "1.15.1", ("numpy>=1.25", "nvidia-cuda-runtime-cu12<13,>=12.6"))]}
    ]
    code, out, err, calls = run_check(tmp_path, monkeypatch, capsys, scenario)
    assert code == 0, err
    assert "all 4 steps resolve" in out and "flash-attn 2.8.3, deepspeed 0.19.6 (metadata built here)" in out
    assert "glibc 2.34 (cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl)" in out
    # Every call ignores this machine's pip config and resolves for the node, not for this machine.
    step_calls = [call_for(calls, f"{n}-{name}") for n, name in enumerate(["torch", "sources", "searchrl"], 1)]
    for call in [*step_calls, call_for(calls, "4-faiss-gpu")]:
        argv = call["argv"]
        assert "--isolated" in argv and call["config"] == os.devnull  # no pip config of this machine's
        assert "--dry-run" in argv and "--only-binary=:all:" in argv
        assert {"--platform=manylinux_2_35_x86_64", "--platform=manylinux2014_x86_64", "--python-version=3.11"} <= set(
            argv
        )
    # Step 3 resolves with torch and the two builds held at what steps 1 and 2 installed.
    held = (tmp_path / "out" / "constraints-3.txt").read_text().split()
    assert held == ["deepspeed==0.19.6", "flash-attn==2.8.3", f"torch=={TORCH}"]
    assert str(tmp_path / "out" / "placeholders") in step_calls[2]["argv"]
    # The builds' metadata: no build isolation, in the build venv, a stand-in nvcc at torch's CUDA version.
    meta = call_for(calls, "2-sources-metadata")
    assert meta["argv"][:2] == ["--python", str(tmp_path / "out" / "build-env" / "bin" / "python")]
    assert {"--no-build-isolation", "--no-deps", "--no-binary=:all:"} <= set(meta["argv"])
    assert "release 13.0," in (Path(meta["cuda_home"]) / "bin" / "nvcc").read_text()
    site = next((tmp_path / "out" / "build-env" / "lib").glob("python*/site-packages"))
    assert (site / "torch").is_symlink() and (site / "sitecustomize.py").exists()
    wheels = sorted(p.name for p in (tmp_path / "out" / "placeholders").iterdir())
    assert wheels == ["deepspeed-0.19.6-py3-none-any.whl", "flash_attn-2.8.3-py3-none-any.whl"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["torch_cuda"] == "13.0" and summary["installed"]["faiss-gpu"] == "1.15.1"


def test_a_conflict_names_the_step_pips_reason_and_the_fix(tmp_path, monkeypatch, capsys):
    script = write_script(tmp_path, "step torch pip install torch==2.12.0", "step app pip install vllm==0.29.0")
    scenario = {"1-torch": [{"install": [item("torch", "2.12.0")]}], "2-app": [{"rc": 1, "output": CONFLICT}]}
    code, out, err, _ = run_check(tmp_path, monkeypatch, capsys, scenario, script)
    assert code == 1 and "step 1/2 torch" in out
    assert "FAILED step app (install_gpu.sh:4): pip install vllm==0.29.0" in err
    assert "| vllm 0.29.0 depends on torch==2.13.0" in err and "| ERROR: ResolutionImpossible" in err
    assert "what earlier steps hold fixed (torch==2.12.0)" in err and "fix: " in err
    assert str(tmp_path / "out" / "logs" / "2-app.log") in err


def test_a_build_need_no_earlier_step_installs_fails_the_step(tmp_path, monkeypatch, capsys):
    script = write_script(
        tmp_path,
        f"step torch pip install torch=={TORCH} setuptools packaging psutil ninja",
        "step sources pip install --no-build-isolation flash-attn==2.8.3 deepspeed==0.19.6",
    )
    scenario = source_scenario(tmp_path)
    scenario["1-torch"] = [{"install": [i for i in torch_step() if i["metadata"]["name"] != "wheel"]}]
    code, _, err, _ = run_check(tmp_path, monkeypatch, capsys, scenario, script)
    assert code == 1 and "FAILED step sources" in err
    assert "flash-attn 2.8.3 builds without isolation, but no earlier step installs wheel" in err
    assert "fix: add wheel to an earlier step" in err


def test_a_source_build_whose_setup_fails_reports_the_exception(tmp_path, monkeypatch, capsys):
    scenario = source_scenario(tmp_path)
    scenario["2-sources-metadata"] = [
        {
            "rc": 1,
            "output": "  Traceback (most recent call last):\n  OSError: CUDA_HOME environment variable is not set.\n"
            "error: metadata-generation-failed",
        }
    ]
    script = write_script(
        tmp_path,
        f"step torch pip install torch=={TORCH} wheel",
        "step sources pip install --no-build-isolation flash-attn==2.8.3 deepspeed==0.19.6",
    )
    code, _, err, _ = run_check(tmp_path, monkeypatch, capsys, scenario, script)
    assert code == 1 and "a source build's setup fails with the earlier steps' packages" in err
    assert "| OSError: CUDA_HOME environment variable is not set." in err


def test_a_pure_python_sdist_becomes_a_placeholder_and_the_step_resolves_again(tmp_path, monkeypatch, capsys):
    script = write_script(tmp_path, "step app pip install openrlhf==0.11.2")
    tsg = sdist(tmp_path, "transformers-stream-generator", "0.0.5", {"setup.py": "from setuptools import setup"})
    scenario = {
        "1-app": [
            *no_wheel("transformers-stream-generator (from openrlhf)"),
            {"install": [item("openrlhf", "0.11.2")]},
        ],
        "1-app-sdist-transformers-stream-generator": [{"install": [tsg]}],
    }
    code, out, err, calls = run_check(tmp_path, monkeypatch, capsys, scenario, script)
    assert code == 0, err
    assert "transformers-stream-generator 0.0.5: no wheel; a pure-Python sdist" in out
    probe = call_for(calls, "1-app-sdist-transformers-stream-generator")["argv"]
    assert "--no-binary=transformers-stream-generator" in probe and "--no-deps" in probe
    assert (tmp_path / "out" / "placeholders" / "transformers_stream_generator-0.0.5-py3-none-any.whl").exists()


def test_an_sdist_with_native_code_is_a_finding(tmp_path, monkeypatch, capsys):
    script = write_script(tmp_path, "step app pip install vllm==0.29.0")
    native = sdist(tmp_path, "llguidance", "1.7.6", {"setup.py": "", "Cargo.toml": "[package]"})
    scenario = {
        "1-app": no_wheel("llguidance<1.8.0,>=1.7.0 (from vllm)"),
        "1-app-sdist-llguidance": [{"install": [native]}],
    }
    code, _, err, _ = run_check(tmp_path, monkeypatch, capsys, scenario, script, "--glibc", "2.28")
    assert code == 1 and "llguidance 1.7.6 has no wheel for CPython 3.11 on manylinux x86_64 (glibc <= 2.28)" in err
    assert "native code (Cargo.toml)" in err and "pin a version of llguidance with a manylinux wheel" in err


def test_a_no_deps_step_needs_its_requirements_from_earlier_steps(tmp_path, monkeypatch, capsys):
    script = write_script(
        tmp_path, "step numpy pip install numpy", "step faiss pip install --no-deps 'faiss-gpu>=1.8'"
    )
    scenario = {
        "1-numpy": [{"install": [item("numpy", "2.3.5")]}],
        "2-faiss": [{"install": [item("faiss-gpu", "1.15.1", ("numpy>=1.25", "nvidia-cublas-cu12<13,>=12.6"))]}],
    }
    code, _, err, _ = run_check(tmp_path, monkeypatch, capsys, scenario, script)
    assert code == 1 and "installs with --no-deps what earlier steps do not satisfy" in err
    assert "faiss-gpu requires nvidia-cublas-cu12<13,>=12.6; the earlier steps install no nvidia-cublas-cu12" in err
    assert "numpy" not in err.split("|", 1)[1].split("\n")[0]


@pytest.mark.parametrize(
    ("torch", "cuda", "code", "message"),
    [
        ("99.0.0", True, 2, "whose CPU build stands in for it here, but torch"),
        (TORCH, False, 1, "resolves without nvidia-cuda-runtime (a CPU build)"),
    ],
)
def test_a_source_build_needs_a_cuda_torch_and_its_stand_in(tmp_path, monkeypatch, capsys, torch, cuda, code, message):
    scenario = source_scenario(tmp_path)
    scenario["1-torch"] = [{"install": torch_step(cuda=cuda, torch=torch)}]
    script = write_script(
        tmp_path,
        f"step torch pip install torch=={torch} wheel",
        "step sources pip install --no-build-isolation flash-attn==2.8.3",
    )
    found, _, err, _ = run_check(tmp_path, monkeypatch, capsys, scenario, script)
    assert found == code and message in err


# The pieces.


def test_pip_reason_keeps_the_errors_and_the_conflict():
    assert pip_reason(CONFLICT).splitlines() == [
        "ERROR: Cannot install vllm==0.29.0 because these package versions have conflicting dependencies.",
        "The conflict is caused by:",
        "vllm 0.29.0 depends on torch==2.13.0",
        "The user requested (constraint) torch==2.12.0",
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/",
    ]
    assert pip_reason("a\nb\nlast words") == "a\nb\nlast words"


def test_torchs_cuda_is_the_runtime_torch_pins():
    items = {i["metadata"]["name"]: i for i in torch_step()}
    assert sources.cuda_version(items) == "13.0"
    items = {"torch": item("torch", "2.7.1"), "nvidia-cuda-runtime-cu12": item("nvidia-cuda-runtime-cu12", "12.6.77")}
    assert sources.cuda_version(items) == "12.6"
    assert sources.cuda_version({i["metadata"]["name"]: i for i in torch_step(cuda=False)}) is None


def test_the_platform_takes_every_older_manylinux_tag():
    args = Target("3.11", (2, 31)).platform_args()
    assert "--platform=manylinux_2_31_x86_64" in args and "--platform=manylinux_2_5_x86_64" in args
    assert "--platform=manylinux_2_32_x86_64" not in args and "--platform=manylinux1_x86_64" in args


def test_glibc_floor_reads_each_files_oldest_tag():
    urls = [
        "https://f/a-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "https://f/b-1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "https://f/c-1-py3-none-any.whl",
    ]
    assert check.glibc_floor(urls) == ((2, 27), "b-1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")


def test_build_needs_leave_out_stdlib_local_and_optional_imports(tmp_path):
    files = {
        "setup.py": DEEPSPEED_SETUP + "import yaml\n",
        "op_builder/__init__.py": "",
        "pyproject.toml": '[build-system]\nrequires = ["scikit-build-core>=0.9"]\n',
    }
    path = Path(sdist(tmp_path, "x", "1", files)["download_info"]["url"][7:])
    assert sources.build_needs(path) == {"setuptools", "pyyaml", "scikit-build-core"}
    flash = Path(sdist(tmp_path, "flash-attn", "2.8.3", {"setup.py": FLASH_SETUP})["download_info"]["url"][7:])
    assert sources.build_needs(flash) == {"packaging", "setuptools", "wheel", "torch", "psutil", "ninja"}


def test_a_placeholder_wheel_carries_the_metadata(tmp_path):
    path = sources.write_placeholder(
        tmp_path, {"name": "flash_attn", "version": "2.8.3", "requires_dist": ["torch", "einops"]}
    )
    with zipfile.ZipFile(path) as whl:
        metadata = whl.read("flash_attn-2.8.3.dist-info/METADATA").decode()
        assert "Requires-Dist: torch\nRequires-Dist: einops" in metadata and "Name: flash_attn" in metadata
        assert "Tag: py3-none-any" in whl.read("flash_attn-2.8.3.dist-info/WHEEL").decode()
