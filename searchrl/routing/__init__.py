"""LLM routing: a question put to one of a pool of LLMs, answered through the search interface
(`searchrl/search/base.py`), with the routing policies (GMTRouter) and the loopback pool for CPU runs."""
