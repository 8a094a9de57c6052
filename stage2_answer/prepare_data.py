"""`python -m stage2_answer.prepare_data --input FILE_OR_HF_NAME --out FILE`: the stage2_answer prompt dataset."""

import sys

from rollout.prompt_data import main

if __name__ == "__main__":
    sys.exit(main("stage2_answer"))
