"""The retrieval server as a Ray Serve replica: the plain server's app, built in the replica from the server's own
command line (`searchrl servers start --engine ray` deploys it; searchrl/ray_serve.py places the replicas)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI

from search_backend.serve.app import config_from_args, create_app, parser
from searchrl.search.index.cpu_threads import short_openmp_spin


def builder(argv: list[str]) -> Callable[[], FastAPI]:
    """What each replica calls to make its app: `searchrl search serve`'s arguments parsed there, so the index
    path, the token (read from the replica's environment) and the thread pools are the replica's own."""

    def build() -> FastAPI:
        # Before FAISS or torch loads in this replica: libgomp reads its spin count once.
        short_openmp_spin()
        return create_app(config_from_args(parser().parse_args(argv)))

    return build
