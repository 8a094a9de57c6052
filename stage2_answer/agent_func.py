"""The file given to OpenRLHF's `--train.agent_func_path` for stage 2 (format + answer reward: learn to use search).

OpenRLHF loads it by path in each vLLM engine process, so the project root is put on sys.path
first; the reward spec and servers come from the resolved config named by $SEARCHRL_CONFIG.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from searchrl.rollout.agent import SearchAgentExecutor, SearchAgentInstance  # noqa: E402


class AgentInstance(SearchAgentInstance):
    pass


class AgentExecutor(SearchAgentExecutor):
    stage = "stage2_answer"
