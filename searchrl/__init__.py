"""The shared vocabulary and plumbing of searchrl: the tag protocol, answer metrics, config loading,
JSON lines, HTTP transport with one retry helper, one OpenAI-compatible client and one server guard.

Everything else in the project imports from here; this package imports nothing else of the project
(tests/test_architecture.py checks both).
"""
