"""A fake OpenAI-compatible chat server on 127.0.0.1 for tests: POST
``/v1/chat/completions`` (streamed as server-sent events, or as one JSON
body), answering from the last user message's text (its last part):

- ``ECHO <text>``: answers ``<text>`` (the default: ``echo: <last message>``);
- ``SLOW <n>``: ``n`` chunks, ``FakeLLM.chunk_delay`` seconds apart;
- ``FAIL``: HTTP 500; ``HANG``: never answers (until the server stops).

``python tests/fake_llm.py`` runs one and prints its port.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeLLM"]


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):  # the newest part: a client may merge two user turns into one message
            texts = [str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("text")]
            content = texts[-1] if texts else ""
        return str(content or "")
    return ""


class FakeLLM:
    """Start with ``with FakeLLM() as llm:``; ``llm.base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self, chunk_delay: float = 0.05) -> None:
        self.chunk_delay = chunk_delay
        self.requests: list[dict[str, Any]] = []
        #: Streams whose client went away before the end, and the chunks each had been sent by then.
        self.aborted: list[int] = []
        self.stopping = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                fake.requests.append(body)
                fake.answer(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.request_queue_size = 256
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-llm", daemon=True)

    def __enter__(self) -> FakeLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def chunks(self, text: str) -> list[str]:
        if text.startswith("SLOW "):
            count = int(text.split()[1])
            return [f"part{i} " for i in range(count)]
        if text.startswith("ECHO "):
            said = text[len("ECHO "):]
            return [said[i:i + 8] for i in range(0, len(said), 8)] or [""]
        said = f"echo: {text}"
        return [said[i:i + 8] for i in range(0, len(said), 8)]

    def answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        text = _last_user_text(body).strip()
        if "FAIL" in text.split():
            self._send(handler, 500, "application/json", json.dumps({"error": {"message": "fake failure"}}).encode())
            return
        if "HANG" in text.split():
            self.stopping.wait(600)
            return
        pieces = self.chunks(text)
        model = body.get("model", "fake")
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(pieces)}
            self._send(handler, 200, "application/json", json.dumps({
                "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": len(pieces), "total_tokens": 1 + len(pieces)},
            }).encode())
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        sent = 0
        try:
            for i, piece in enumerate(pieces):
                delta: dict[str, Any] = {"content": piece}
                if i == 0:
                    delta["role"] = "assistant"
                self._event(handler, {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
                                      "created": int(time.time()),
                                      "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                sent += 1
                if self.chunk_delay and text.startswith("SLOW ") and self.stopping.wait(self.chunk_delay):
                    return
            self._event(handler, {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
                                  "created": int(time.time()),
                                  "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": len(pieces),
                                            "total_tokens": 1 + len(pieces)}})
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.aborted.append(sent)
        handler.close_connection = True

    @staticmethod
    def _event(handler: BaseHTTPRequestHandler, data: dict[str, Any]) -> None:
        handler.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        handler.wfile.flush()

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, kind: str, data: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


if __name__ == "__main__":
    with FakeLLM() as llm:
        print(llm.port, flush=True)
        try:
            sys.stdin.read()
        except KeyboardInterrupt:
            pass
