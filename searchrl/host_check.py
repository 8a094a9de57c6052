"""Which `Host` headers a server without a bearer token answers: DNS rebinding protection.

A web page open in a browser on the same machine may point a name it controls at 127.0.0.1; the browser then
sends it same-origin requests to our port with `Host: that.name`, and reads the answers. Refusing every host
name that is not a loopback name or one the operator allowed stops that. An IP literal is allowed too: a
rebinding attack needs a name, and replicas on a cluster network are addressed by IP. With a token the check
is not needed (a page cannot know the token).
"""

from __future__ import annotations

import functools
import ipaddress

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def host_name(header: bytes) -> str:
    """The host of a Host header value without its port, lower case: `[::1]:8002` -> `::1`."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1 : text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


@functools.lru_cache(maxsize=1024)  # a server sees a handful of Host values; this runs on every request
def allowed_host(header: bytes | None, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a request with this Host header may be answered without a token: an IP address, a loopback
    name (`localhost`, `*.localhost`), or a name in `extra` (`*` allows any). A request without a Host header
    is answered: browsers always send one, so it cannot come from a rebound page."""
    if header is None:
        return True
    name = host_name(header)
    if name in LOOPBACK_NAMES or name.endswith(".localhost") or name in extra or "*" in extra:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
