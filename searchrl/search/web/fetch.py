"""Safe page fetching: http(s) only, public addresses only, redirects re-checked, text types only, size/time caps."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import zlib
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx

from searchrl.search.web.errors import FetchError, FetchRefusedError
from searchrl.search.web.extract import html_to_text

TEXT_TYPES = frozenset({"text/html", "text/plain", "application/xhtml+xml"})
_REDIRECTS = {301, 302, 303, 307, 308}
# Only encodings inflated here, in bounded steps; httpx would inflate each network chunk whole.
ACCEPT_ENCODING = "gzip, deflate"
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    max_bytes: int = 2_000_000
    timeout_s: float = 15.0
    max_redirects: int = 5
    allow_private: bool = False
    # Addresses allowed although not public: a self-hosted page server, or the loopback test servers.
    allow_addresses: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    content_type: str
    title: str
    text: str


def address_refusal(ip: IPAddress, policy: FetchPolicy) -> str | None:
    """Why the policy refuses to connect to `ip`, or None when it may."""
    if policy.allow_private or str(ip) in policy.allow_addresses:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind in ("loopback", "private", "link_local", "multicast", "reserved", "unspecified"):
        if getattr(ip, f"is_{kind}"):
            return f"{kind.replace('_', '-')} address {ip}"
    # is_global also rules out shared (carrier-grade NAT) space and the documentation ranges.
    if not ip.is_global:
        return f"non-public address {ip}"
    return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos))


async def _checked_target(url: str, policy: FetchPolicy) -> tuple[httpx.URL, str]:
    """The URL with its host pinned to a checked address, and the original host name (for Host and SNI)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise FetchRefusedError(url, "invalid URL", str(exc)) from exc
    if parsed.scheme not in ("http", "https"):
        raise FetchRefusedError(url, "scheme not allowed", f"{parsed.scheme or 'none'}: only http and https")
    host = parsed.host
    if not host:
        raise FetchRefusedError(url, "invalid URL", "no host")
    try:
        addresses = await resolve(host, parsed.port or (443 if parsed.scheme == "https" else 80))
    except OSError as exc:
        raise FetchError(url, "unresolvable host", str(exc)) from exc
    for ip in addresses:
        if (why := address_refusal(ip, policy)) is not None:
            raise FetchRefusedError(url, "private address", f"{host} resolves to {why}")
    # Connecting to the address we checked, not to a fresh lookup, closes the DNS-rebinding window.
    return parsed.copy_with(host=str(addresses[0])), host


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _charset(content_type: str) -> str:
    for part in content_type.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


class _Inflater:
    """gzip or deflate, inflated at most `room` bytes at a time: a 2 MB cap never allocates more than that.

    `deflate` is meant to be zlib-wrapped, but some servers send raw deflate; the first error retries raw.
    """

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.inflater = zlib.decompressobj(_WBITS[encoding])
        self.started = False

    def inflate(self, data: bytes, body: bytearray, limit: int) -> None:
        while data and not self.inflater.eof:
            try:
                out = self.inflater.decompress(data, limit + 1 - len(body))
            except zlib.error:
                if self.encoding != "deflate" or self.started:
                    raise
                self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self.inflater.decompress(data, limit + 1 - len(body))
            self.started = True
            body += out
            if len(body) > limit:
                return
            data = self.inflater.unconsumed_tail


async def _read_body(response: httpx.Response, url: str, limit: int) -> bytes:
    """The decoded body, refused as soon as it passes `limit` bytes, compressed or not."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity", *_WBITS):
        raise FetchRefusedError(url, "content encoding not supported", encoding)
    inflater = _Inflater(encoding) if encoding in _WBITS else None
    body = bytearray()
    async for chunk in response.aiter_raw():
        if inflater is None:
            body += chunk
        else:
            try:
                inflater.inflate(chunk, body, limit)
            except zlib.error as exc:
                raise FetchError(url, "corrupt compressed body", str(exc)) from exc
        if len(body) > limit:
            raise FetchRefusedError(url, "too large", f"body passed {limit} bytes")
    return bytes(body)


async def _fetch(client: httpx.AsyncClient, url: str, policy: FetchPolicy) -> Page:
    current = url
    for _ in range(policy.max_redirects + 1):
        target, host = await _checked_target(current, policy)
        name = f"[{host}]" if ":" in host else host
        headers = {
            "Host": name if target.port is None else f"{name}:{target.port}",
            "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9",
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        extensions = {"sni_hostname": host} if target.scheme == "https" else {}
        async with client.stream(
            "GET", target, headers=headers, extensions=extensions, follow_redirects=False
        ) as response:
            if response.status_code in _REDIRECTS:
                location = response.headers.get("location")
                if not location:
                    raise FetchError(current, "redirect without Location")
                current = urljoin(current, location)
                continue
            if response.status_code >= 400:
                raise FetchError(current, "HTTP error", f"status {response.status_code}")
            content_type = response.headers.get("content-type", "")
            if _media_type(content_type) not in TEXT_TYPES:
                raise FetchRefusedError(current, "content type not allowed", content_type or "none given")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > policy.max_bytes:
                raise FetchRefusedError(current, "too large", f"Content-Length {declared} > {policy.max_bytes}")
            body = await _read_body(response, current, policy.max_bytes)
            try:
                markup = bytes(body).decode(_charset(content_type), errors="replace")
            except LookupError:
                markup = bytes(body).decode("utf-8", errors="replace")
            if _media_type(content_type) == "text/plain":
                return Page(
                    current, content_type, "", "\n".join(line.strip() for line in markup.splitlines() if line.strip())
                )
            title, text = html_to_text(markup)
            return Page(current, content_type, title, text)
    raise FetchRefusedError(url, "too many redirects", f"more than {policy.max_redirects}")


async def fetch_page(client: httpx.AsyncClient, url: str, policy: FetchPolicy) -> Page:
    """Fetch one page under `policy`; FetchRefusedError for a policy refusal, FetchError for any other failure.

    `client` must not carry credentials (provider keys), should have trust_env=False (no proxy between the address
    check and the connection) and no keep-alive: its pool is keyed by the pinned address, so a kept connection could
    carry another host's request over a TLS session checked for the first.
    """
    try:
        async with asyncio.timeout(policy.timeout_s):
            return await _fetch(client, url, policy)
    except TimeoutError as exc:
        raise FetchError(url, "timed out", f"after {policy.timeout_s}s") from exc
    except httpx.HTTPError as exc:
        raise FetchError(url, "network error", type(exc).__name__) from exc
    except httpx.InvalidURL as exc:
        raise FetchRefusedError(url, "invalid URL", str(exc)) from exc
