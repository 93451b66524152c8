"""A scripted OpenAI-compatible server for the tests: /v1/chat/completions answered from a script.

Each request takes the next step of the script. A step is a dict:

    {"message": {"content": ..., "tool_calls": [...]}}     an answer (finish_reason "stop"/"tool_calls")
    {"status": 429, "headers": {"Retry-After": "0"}}       an HTTP error
    {"delay": 3.0, ...}                                    wait before answering the rest of the step
    {"refusal": "I can't help with that."}                 a refusal
    a callable taking the request body and returning a step (for answers that depend on the request)

The helpers below build steps. Token usage is counted deterministically from the request and the
answer (4 characters a token), so budgets can be tested exactly. Every request body is kept in
`requests`; when the script is exhausted the server answers 400, which the client does not retry.

    with ScriptedServer([tool("shell", command="ls"), submit(...)]) as server:
        os.environ["OPENAI_BASE_URL"] = server.url
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any

Step = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]
_ids = count(1)


def say(content: str) -> dict[str, Any]:
    """A plain text answer (no tool call)."""
    return {"message": {"content": content}}


def tool(name: str, arguments: dict[str, Any] | str | None = None, **kw: Any) -> dict[str, Any]:
    """An answer calling one tool; `arguments` as text is sent as is (to script malformed JSON)."""
    args = arguments if isinstance(arguments, str) else json.dumps({**(arguments or {}), **kw})
    return {"message": {"content": None, "tool_calls": [
        {"id": f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": args}}]}}


def submit(break_script: str, fix_script: str, summary: str, evidence: list[str] | None = None,
           note: str = "the change is undone by the fix") -> dict[str, Any]:
    return tool("submit", break_script=break_script, fix_script=fix_script, summary=summary,
                evidence=evidence or ["reversible"], evidence_note=note)


def status(code: int, retry_after: float | None = None) -> dict[str, Any]:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return {"status": code, "headers": headers}


def slow(seconds: float, step: dict[str, Any]) -> dict[str, Any]:
    return {**step, "delay": seconds}


def refuse(text: str = "I can't help with breaking software environments.") -> dict[str, Any]:
    return {"refusal": text}


def tokens_of(text: str) -> int:
    return max(1, len(text) // 4)


class ScriptedServer:
    """A ThreadingHTTPServer on 127.0.0.1 (a free port) playing a script of steps."""

    def __init__(self, script: list[Step] | None = None, model: str = "scripted") -> None:
        self.steps: deque[Step] = deque(script or [])
        self.requests: list[dict[str, Any]] = []
        self.model = model
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def add(self, *steps: Step) -> None:
        with self.lock:
            self.steps.extend(steps)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def next_step(self, body: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            self.requests.append(body)
            step = self.steps.popleft() if self.steps else None
        return step(body) if callable(step) else step

    def completion(self, body: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
        message = {"role": "assistant", "content": None, **step.get("message", {})}
        if "refusal" in step:
            message["refusal"] = step["refusal"]
        reason = "tool_calls" if message.get("tool_calls") else "stop"
        answer = json.dumps(message)
        prompt = tokens_of(json.dumps(body.get("messages", [])))
        return {"id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", self.model),
                "choices": [{"index": 0, "message": message, "finish_reason": step.get("finish_reason", reason)}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": tokens_of(answer),
                          "total_tokens": prompt + tokens_of(answer)}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                step = server.next_step(body)
                if step is None:
                    self._send(400, {"error": {"message": "the script is exhausted", "type": "invalid_request"}})
                    return
                if step.get("delay"):
                    time.sleep(step["delay"])
                if "status" in step:
                    self._send(step["status"], {"error": {"message": f"scripted {step['status']}"}},
                               step.get("headers"))
                    return
                self._send(200, server.completion(body, step))

        return Handler
