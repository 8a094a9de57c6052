"""The retrieval HTTP server and what it runs beside the backend: micro-batching, the result cache, index reload."""
