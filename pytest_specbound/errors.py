"""Exception types. Every user-facing error renders as one line."""

from __future__ import annotations


class SpecboundError(Exception):
    """Base class: a problem the user can fix, shown as one line without a traceback."""


class ConfigError(SpecboundError):
    """Bad input: a flag, a budget key, a hardware string, a model file."""


class ServerError(SpecboundError):
    """The inference server could not be launched, reached or made ready."""


class PortTaken(ServerError):
    """The port chosen for a launch was taken by another process while the server started."""


class RequestError(SpecboundError):
    """One request to the server failed; carries its cause."""

    @property
    def reason(self) -> str:
        """The message without its leading ``METHOD /path: `` (what the server answered)."""
        text = str(self)
        head, sep, rest = text.partition(": ")
        return rest if sep and head.split(" ")[0] in ("GET", "POST") else text


def close_matches(word: str, choices: list[str], n: int = 5) -> list[str]:
    """Return up to ``n`` choices close to ``word`` (difflib), else the first few choices."""
    import difflib

    found = difflib.get_close_matches(word.lower(), choices, n=n, cutoff=0.5)
    return found or sorted(choices)[:n]
