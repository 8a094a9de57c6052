"""`random_uuid`, as vLLM names requests."""

from __future__ import annotations

import uuid


def random_uuid() -> str:
    return uuid.uuid4().hex
