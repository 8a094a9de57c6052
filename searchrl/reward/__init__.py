"""The reward as a library: the spec, its components, the format rules, scoring and the group terms. The reward
server (reward_server/) serves it; the agent imports it in its vLLM worker."""
