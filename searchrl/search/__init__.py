"""The search library: the interface (the `SearchBackend` protocol and its result types, the `search:` schema, the
HTTP client the agent uses) and, above it, the backends by name (backends.py), index building and import (index/),
encoders (encode/) and web providers (web/). The retrieval service that serves them is search_backend/."""
