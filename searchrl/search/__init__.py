"""The search interface: the `SearchBackend` protocol and its result types, the `search:` schema and the HTTP
client the agent uses. The backends themselves live in search_backend/."""
