"""The GPU install's dry run: launch/install_gpu.sh's pip steps, resolved for the GPU platform without installing.

`steps` reads the steps from the script (the one source of truth; the docs show them), `pip` runs pip's resolver
(dry runs, reports, pip's own reason on failure), `sources` checks what builds from source, `run` carries each
step's result to the next, and `check` is the command line: `python launch/check_gpu_install.py --help`.
"""
