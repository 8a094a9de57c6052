"""The file given to OpenRLHF's `--train.agent_func_path` for Router-R1 (route questions to a pool of LLMs).

OpenRLHF loads it by path in each vLLM engine process, so the project root is put on sys.path
first; the pool, the reward spec and the cost weight come from the resolved stage config.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from searchrl.rollout.agent import SearchAgentExecutor, SearchAgentInstance  # noqa: E402


class AgentInstance(SearchAgentInstance):
    pass


class AgentExecutor(SearchAgentExecutor):
    stage = "router_r1"
