"""`python launch/check_gpu_install.py`: launch/install_gpu.sh's steps resolved by pip for the GPU platform, as a
dry run (nothing installed); `--help` for the options. The check itself is launch/gpu_install/check.py."""

from __future__ import annotations

import sys

from launch.gpu_install.check import main

if __name__ == "__main__":
    sys.exit(main())
