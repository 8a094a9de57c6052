"""`python -m stage1_format.prepare_data --input FILE_OR_HF_NAME --out FILE`: the stage1_format prompt dataset."""

import sys

from rollout.prompt_data import main

if __name__ == "__main__":
    sys.exit(main("stage1_format"))
