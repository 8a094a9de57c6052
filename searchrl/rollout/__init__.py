"""The episode: what a vLLM worker runs (the OpenRLHF agent, the environment step, the reward client,
the engines and the search step's backend by name)."""
