"""Backends over a server their engine starts (`Engine.launch`): the engine owns the server's process.

A `LaunchedBackend` asks for its server as it is made and gives it back when it closes. Servers are
shared within the process: backends whose engine options name the same server (the engine's
`Launch.options`, e.g. the same GGUF and LoRA) use one, started by the first and stopped when the
last closes, so an annotator and a supervisor of one model cost one server, as do a judge and its
retries. Requests then go over the OpenAI-compatible API like any served engine's (`openai_compat`),
and a call that fails once the server has died names the crash (`server.watch_endpoint`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from spanjudge.core.errors import InputError

from .engine import Launch, Launched
from .openai_compat import OpenAIBackend
from .spec import BackendSpec

_LOCK = threading.Lock()
_RUNNING: dict[tuple[str, str], tuple[Launched, int]] = {}  # (engine, its server options) -> (server, backends)


def _key(engine: str, options: Mapping[str, Any]) -> tuple[str, str]:
    return engine, repr(sorted((name, str(value)) for name, value in options.items()))


def acquire(engine: str, launch: Launch, options: Mapping[str, Any]) -> Launched:
    """The running server of these options, or one started now (its start raises with the crash report)."""
    server_options = {name: options[name] for name in launch.options if options.get(name) is not None}
    key = _key(engine, server_options)
    with _LOCK:  # one start per server, even when two threads make backends of one model at once
        server, users = _RUNNING.get(key, (None, 0))
        if server is None or server.crash_report() is not None:
            server, users = launch.start(server_options), 0
        _RUNNING[key] = (server, users + 1)
        return server


def release(server: Launched) -> None:
    """One backend fewer on `server`; the last one stops it."""
    with _LOCK:
        for key, (running, users) in list(_RUNNING.items()):
            if running is server:
                if users > 1:
                    _RUNNING[key] = (running, users - 1)
                    return
                del _RUNNING[key]
        server.stop()


def running_servers() -> int:
    """How many launched servers run in this process."""
    with _LOCK:
        return len(_RUNNING)


class LaunchedBackend(OpenAIBackend):
    """The OpenAI-compatible API of the server `launch` starts from the spec's engine options (see the module
    docstring); `spec.endpoints` must be empty: the server's address is its own."""

    launch: ClassVar[Launch]

    def __init__(self, spec: BackendSpec) -> None:
        if spec.endpoints:
            raise InputError(
                f"engine {spec.kind!r} starts its own server: give it no endpoints or base_url (its engine "
                f"options: {', '.join(self.launch.options)})"
            )
        self._server: Launched | None = acquire(spec.kind, self.launch, spec.options)
        served = {name: value for name, value in spec.options.items() if name not in self.launch.options}
        try:
            super().__init__(spec.model_copy(update={"endpoints": (self._server.base_url,), "options": served}))
        except BaseException:
            self.close()
            raise

    @property
    def server(self) -> Launched:
        if self._server is None:
            raise InputError(f"engine {self.spec.kind!r}: its backend is closed")
        return self._server

    def close(self) -> None:
        try:
            super().close()
        finally:
            server, self._server = self._server, None
            if server is not None:
                release(server)
