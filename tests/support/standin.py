"""A scripted stand-in for model servers, for failure paths no real server shows on demand.

A stdlib `http.server` on 127.0.0.1 answers in the OpenAI JSON shape
(`/v1/chat/completions`, `/v1/completions`) or Ollama's native shape (`/api/chat`,
non-streaming), as scripted per hit, and records every request. Tests use it through the
`serve` fixture in conftest.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """What the stand-in does for one hit: wait `delay` seconds, then answer."""

    status: int = 200
    text: str = "stand-in reply"
    delay: float = 0.0
    finish_reason: str | None = None  # default: "stop" for chat, "length" for completions


@dataclass
class StandIn:
    """A scripted HTTP server on 127.0.0.1: hit n gets replies[n] (the last one repeats),
    or, when `replies` is a function, the reply it picks for the request body."""

    replies: list[Reply] | Callable[[dict[str, Any]], Reply]
    ollama: bool = False  # answer in Ollama's /api/chat shape instead of OpenAI's
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closing: threading.Event = field(default_factory=threading.Event)

    @property
    def hits(self) -> int:
        return len(self.bodies)

    def next_reply(self, path: str, body: dict[str, Any], authorization: str | None) -> Reply:
        with self._lock:
            self.paths.append(path)
            self.authorizations.append(authorization)
            self.bodies.append(body)
            if callable(self.replies):
                return self.replies(body)
            return self.replies[min(len(self.bodies), len(self.replies)) - 1]

    def payload(self, reply: Reply, body: dict[str, Any], path: str) -> dict[str, Any]:
        if reply.status != 200:
            return {"error": {"message": f"stand-in says {reply.status}", "type": "stand_in"}}
        if path.endswith("/v1/completions"):
            return self.completions_payload(reply, body)
        if self.ollama:
            return {
                "model": body.get("model"),
                "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": reply.text},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 7,
                "eval_count": 3,
            }
        return {
            "id": f"cmpl-{self.hits}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason or "stop",
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }

    def completions_payload(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"cmpl-{self.hits}",
            "object": "text_completion",
            "created": 0,
            "model": body.get("model"),
            "choices": [
                {"index": 0, "text": reply.text, "finish_reason": reply.finish_reason or "length", "logprobs": None}
            ],
            "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8},
        }

    def wait(self, seconds: float) -> None:
        """Sleep for a hang, but end it at once when the server is shut down."""
        self._closing.wait(seconds)


def _handler(stand_in: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            reply = stand_in.next_reply(self.path, body, self.headers.get("Authorization"))
            if reply.delay:
                stand_in.wait(reply.delay)
            data = json.dumps(stand_in.payload(reply, body, self.path)).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout test): nothing to answer
                pass

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

    return Handler


def start_stand_in(
    replies: list[Reply] | Callable[[dict[str, Any]], Reply], ollama: bool = False
) -> tuple[ThreadingHTTPServer, StandIn, str]:
    stand_in = StandIn(replies, ollama=ollama)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stand_in))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    host, port = server.server_address[:2]
    return server, stand_in, f"http://{host}:{port}" + ("" if ollama else "/v1")


def stop_stand_in(server: ThreadingHTTPServer, stand_in: StandIn) -> None:
    stand_in._closing.set()
    server.shutdown()
    server.server_close()
