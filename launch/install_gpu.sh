#!/usr/bin/env bash
# The GPU install of searchrl[train,gpu], in an order pip can carry out. OpenRLHF 0.11.2 pins flash-attn 2.8.3 and
# DeepSpeed 0.19.6, which PyPI has only as source; their builds import torch, so a single `pip install -e
# '.[train,gpu]'` stops before installing anything. torch comes first, then the two are built against it without
# build isolation, then searchrl with vLLM, then faiss-gpu again so that its `faiss` replaces faiss-cpu's files.
#
# Usage: bash launch/install_gpu.sh          into the active Python (PYTHON=/path/to/python picks another)
#   Needs: Linux x86_64 with glibc >= 2.31, Python 3.11, an NVIDIA driver for CUDA 13.0 (>= 580), the CUDA 13 nvcc
#   (CUDA_HOME, or an nvidia/cuda:13.0.x-devel image): PyPI's torch 2.13.0 is a CUDA 13.0 build, both builds
#   check nvcc against it, and DeepSpeed compiles its fused Adam with nvcc on first use.
#   flash-attn compiles from source (each nvcc job holds about 9 GB; MAX_JOBS caps them, FLASH_ATTN_CUDA_ARCHS=90
#   builds for Hopper only): tens of minutes on many cores, hours on few. FLASH_ATTN_WHEEL=URL-or-path installs a
#   prebuilt flash_attn 2.8.3 wheel for torch 2.13 + CUDA 13.0 + cp311 instead (docs/TRAINING.md names one).
#
# Every `step NAME pip install ...` line is one pip command. `python launch/check_gpu_install.py` reads these lines
# and resolves each one for the GPU platform (a dry run: nothing installed); docs/TRAINING.md shows them, and
# tests/test_gpu_install.py keeps the two equal.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
PY="${PYTHON:-python3}"
START=$SECONDS

# nvcc before anything is downloaded: without it both source builds fail, after gigabytes of torch.
NVCC="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
[ -x "$NVCC" ] || NVCC="$(command -v nvcc || true)"
if [ -z "$NVCC" ]; then
  echo "[install_gpu] no nvcc (CUDA_HOME=${CUDA_HOME:-unset}, none on PATH): flash-attn and DeepSpeed build" \
    "against torch's CUDA 13.0. Install the CUDA 13 toolkit (or use an nvidia/cuda:13.0.x-devel image) and set" \
    "CUDA_HOME to it." >&2
  exit 1
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "[install_gpu] note: $("$PY" -V) here; the dry run checked these steps for Python 3.11" \
    "(python launch/check_gpu_install.py --python-version X.Y checks another)."
fi

# One pip command, with a line a minute while it runs: a source build is silent for a long time.
step() {
  local name=$1 ticker
  shift
  echo "[install_gpu] step $name: $*"
  (i=0; while sleep 60; do i=$((i + 1)); echo "[install_gpu]   step $name: ${i} min"; done) &
  ticker=$!
  if ! "$PY" -m "$@"; then
    kill "$ticker" 2>/dev/null || true
    echo "[install_gpu] step $name failed: see pip's output above; python launch/check_gpu_install.py resolves" \
      "every step without installing, to tell a pin conflict from a build problem." >&2
    exit 1
  fi
  kill "$ticker" 2>/dev/null || true
}

# torch.utils.cpp_extension refuses an nvcc of another CUDA major version than torch's, at build time.
check_nvcc() {
  local torch_cuda nvcc_cuda
  torch_cuda="$("$PY" -c 'import torch; print(torch.version.cuda or "none")')"
  nvcc_cuda="$("$NVCC" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')"
  if [ "$torch_cuda" = "none" ]; then
    echo "[install_gpu] step torch left a CPU build of torch ($("$PY" -c 'import torch; print(torch.__version__)')):" \
      "a pip config (index, find-links) chose it over PyPI's CUDA build; uninstall it and rerun with" \
      "PIP_CONFIG_FILE=/dev/null, or an index that serves the CUDA 13.0 build." >&2
    exit 1
  fi
  if [ "${torch_cuda%%.*}" != "${nvcc_cuda%%.*}" ]; then
    echo "[install_gpu] torch is built for CUDA $torch_cuda but $NVCC is CUDA ${nvcc_cuda:-unknown}: install the" \
      "CUDA ${torch_cuda%%.*} toolkit and point CUDA_HOME at it." >&2
    exit 1
  fi
  echo "[install_gpu] torch CUDA $torch_cuda, nvcc $nvcc_cuda ($NVCC)"
}

# flash-attn's setup.py otherwise downloads a GitHub wheel it names cu12 for every CUDA >= 12 torch (wrong for 13.0).
export FLASH_ATTENTION_FORCE_BUILD=TRUE
step torch pip install torch==2.13.0 setuptools wheel packaging psutil ninja
check_nvcc
step sources pip install --no-build-isolation "${FLASH_ATTN_WHEEL:-flash-attn==2.8.3}" deepspeed==0.19.6
step searchrl pip install -e '.[train,gpu]'
step faiss-gpu pip install --force-reinstall --no-deps 'faiss-gpu>=1.8'
"$PY" -c 'import deepspeed, faiss, flash_attn, openrlhf, torch, vllm
print("[install_gpu] imports ok: torch", torch.__version__, "flash_attn", flash_attn.__version__, "vllm",
      vllm.__version__, "faiss GPUs", faiss.get_num_gpus())'
echo "[install_gpu] done in $((SECONDS - START)) s"
