"""Server URLs: validation with an error that names where the URL came from; loopback test."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pytest_specbound.errors import ConfigError


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_url(url: str, origin: str = "url") -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL; anything else is a ConfigError naming ``origin``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{origin}={url}: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{origin}={url}: expected http://HOST:PORT or https://HOST:PORT")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)
