"""The one place faiss is imported. Its loader logs, at INFO, a `ModuleNotFoundError ... swigfaiss_avx2`
line on every machine without the AVX2 build before it falls back to the generic one; under any
command that configures logging that line reads as a failure, so the loader's logger is quietened here.
"""

import logging

logging.getLogger("faiss.loader").setLevel(logging.WARNING)

import faiss  # noqa: E402

__all__ = ["faiss"]
