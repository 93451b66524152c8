"""The model client: one OpenAI-compatible chat endpoint, cached, budgeted, retried, accounted.

Any server that speaks the OpenAI chat-completions protocol works (a hosted API, vLLM,
llama.cpp's server, Ollama): the server comes from the `openai` client's usual variables
(`OPENAI_BASE_URL`, `OPENAI_API_KEY`) unless given. Every call

  - is answered from the on-disk cache when the same request (model, messages, tools,
    response format, seed, temperature, max tokens) was answered before: a rerun with the same
    seed spends no tokens on what it already asked (the server's URL is not part of the key:
    the model name is the identity);
  - waits for a free slot (at most `concurrency` calls in flight per client);
  - is retried with exponential backoff on 429, 5xx, timeouts and dropped connections (a
    Retry-After header is honoured), and fails at once on other errors;
  - is charged to a token budget (a goal's, which charges the crawl's): once a budget is spent,
    the next call raises BudgetExhausted instead of reaching the server;
  - comes back with its accounting (`Call`: tokens, latency, outcome, cached).

    client = LLMClient(LLMSettings(model="gpt-4o-mini"), cache_dir=store.cache_root / "llm")
    reply = client.chat([{"role": "user", "content": "hi"}], tools=[...])
    reply.content, reply.tool_calls, reply.call.prompt_tokens

This module imports nothing of miner: it sits below every stage that talks to a model.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER = 60.0  # seconds: a longer Retry-After is capped
CACHE_VERSION = 1


class LLMError(Exception):
    """A model call that could not be answered; `outcome` names why (for the accounting)."""

    def __init__(self, message: str, outcome: str, call: Call | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.call = call


class BudgetExhausted(LLMError):
    """A token budget is spent: no further call is made against it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "budget")


@dataclass(frozen=True)
class LLMSettings:
    """Which model, where, and how patiently."""

    model: str
    base_url: str | None = None  # default: $OPENAI_BASE_URL (the SDK's own default otherwise)
    api_key: str | None = None  # default: $OPENAI_API_KEY, or "none" for local servers
    timeout: float = 120.0  # seconds per HTTP request
    retries: int = 4  # extra attempts on 429 / 5xx / timeouts
    backoff: float = 1.0  # first wait, doubled at each retry (plus jitter)
    concurrency: int = 4  # calls in flight at once
    temperature: float = 0.0
    seed: int = 0
    max_tokens: int = 1024  # completion tokens per call
    json_mode: str = "off"  # structured replies: off | schema (OpenAI json_schema) | object (json_object + schema)


class TokenBudget:
    """A thread-safe count of tokens spent against an optional limit; charges its parent too."""

    def __init__(self, limit: int | None = None, parent: TokenBudget | None = None, name: str = "crawl") -> None:
        self.limit, self.parent, self.name = limit, parent, name
        self.spent = 0
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise BudgetExhausted when this budget (or a parent) is spent."""
        if self.limit is not None and self.spent >= self.limit:
            raise BudgetExhausted(f"{self.name} token budget spent ({self.spent} of {self.limit})")
        if self.parent is not None:
            self.parent.check()

    def charge(self, tokens: int) -> None:
        with self._lock:
            self.spent += tokens
        if self.parent is not None:
            self.parent.charge(tokens)

    @property
    def exhausted(self) -> bool:
        try:
            self.check()
        except BudgetExhausted:
            return True
        return False


@dataclass
class Call:
    """The accounting of one model call (a cache hit costs nothing)."""

    model: str
    key: str  # the request's cache key
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0  # seconds, retries and waits included
    attempts: int = 0  # HTTP requests made (0 for a cache hit)
    outcome: str = "ok"  # ok | cached | refused | timeout | http-<status> | connection | budget | bad-response
    cached: bool = False

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def row(self) -> dict[str, Any]:
        """The call as the store records it."""
        return {"model": self.model, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "latency": self.latency, "attempts": self.attempts, "outcome": self.outcome, "cached": self.cached}


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it (may be malformed)


@dataclass
class Reply:
    """What the model answered, with the call's accounting."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = ""
    refusal: str | None = None
    call: Call | None = None

    def to_json(self) -> dict[str, Any]:
        return {"content": self.content, "finish_reason": self.finish_reason, "refusal": self.refusal,
                "tool_calls": [vars(t) for t in self.tool_calls]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reply:
        return cls(content=data.get("content") or "", finish_reason=data.get("finish_reason") or "",
                   refusal=data.get("refusal"), tool_calls=[ToolCall(**t) for t in data.get("tool_calls", [])])

    @property
    def refused(self) -> bool:
        return bool(self.refusal) or self.finish_reason == "content_filter"


def request_key(request: dict[str, Any]) -> str:
    """The cache key of a request: a hash of everything that shapes the answer."""
    blob = json.dumps({"v": CACHE_VERSION, **request}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ReplyCache:
    """Replies on disk, one JSON file per request key, written atomically (safe across processes)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def put(self, key: str, data: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)


class LLMClient:
    """Chat completions against one model, shared by the threads of a crawl."""

    def __init__(self, settings: LLMSettings, cache_dir: Path | None = None,
                 budget: TokenBudget | None = None) -> None:
        self.settings = settings
        self.cache = ReplyCache(cache_dir) if cache_dir is not None else None
        self.budget = budget or TokenBudget()
        self._slots = threading.BoundedSemaphore(max(1, settings.concurrency))
        self._client: openai.OpenAI | None = None
        self._client_lock = threading.Lock()

    @property
    def server(self) -> str:
        """The base URL calls go to."""
        return self.settings.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"

    def _sdk(self) -> openai.OpenAI:
        with self._client_lock:
            if self._client is None:
                key = self.settings.api_key or os.environ.get("OPENAI_API_KEY") or "none"
                self._client = openai.OpenAI(base_url=self.server, api_key=key, timeout=self.settings.timeout,
                                             max_retries=0)
            return self._client

    def json_format(self, schema: dict[str, Any], name: str = "reply") -> dict[str, Any] | None:
        """The response_format asking for JSON of a schema, as this server understands it (None: ask in words).

        `schema` is OpenAI's {"type": "json_schema", ...}; `object` is llama.cpp's server, which
        takes {"type": "json_object", "schema": ...} instead.
        """
        if self.settings.json_mode == "schema":
            return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
        if self.settings.json_mode == "object":
            return {"type": "json_object", "schema": schema}
        return None

    def request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                response_format: dict[str, Any] | None = None, max_tokens: int | None = None,
                tool_choice: str | dict[str, Any] = "auto") -> dict[str, Any]:
        """The request body a chat call sends (and hashes for the cache)."""
        body: dict[str, Any] = {"model": self.settings.model, "messages": messages,
                                "temperature": self.settings.temperature, "seed": self.settings.seed,
                                "max_tokens": max_tokens or self.settings.max_tokens}
        if tools:  # "auto" is OpenAI's default, but llama.cpp's server ignores the tools without it
            body["tools"], body["tool_choice"] = tools, tool_choice
        if response_format:
            body["response_format"] = response_format
        return body

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
             response_format: dict[str, Any] | None = None, max_tokens: int | None = None,
             budget: TokenBudget | None = None, tool_choice: str | dict[str, Any] = "auto") -> Reply:
        """One answer: from the cache, or from the server within the budget; raises LLMError.

        `tool_choice` is "auto" or {"type": "function", "function": {"name": NAME}} (that tool, forced).
        """
        budget = budget or self.budget
        body = self.request(messages, tools, response_format, max_tokens, tool_choice)
        key = request_key(body)
        call = Call(model=self.settings.model, key=key)
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            reply = Reply.from_json(hit["reply"])
            call.outcome, call.cached = "cached", True
            reply.call = call
            return reply
        budget.check()
        start = time.monotonic()
        try:
            reply = self._ask(body, call)
        finally:
            call.latency = round(time.monotonic() - start, 3)
            budget.charge(call.tokens)
        call.outcome = "refused" if reply.refused else "ok"
        reply.call = call
        if self.cache is not None:
            self.cache.put(key, {"request": body, "reply": reply.to_json(),
                                 "usage": {"prompt_tokens": call.prompt_tokens,
                                           "completion_tokens": call.completion_tokens}})
        return reply

    def _ask(self, body: dict[str, Any], call: Call) -> Reply:
        """POST the request, retrying what a later attempt may fix."""
        for attempt in range(self.settings.retries + 1):
            call.attempts = attempt + 1
            try:
                with self._slots:
                    response = self._sdk().chat.completions.create(**body)
                return _reply(response, call)
            except openai.APIStatusError as exc:
                call.outcome = f"http-{exc.status_code}"
                retry, wait = exc.status_code in RETRYABLE_STATUS, _retry_after(exc)
                detail = _error_text(exc)
            except openai.APITimeoutError:
                call.outcome, retry, wait, detail = "timeout", True, None, f"no answer within {self.settings.timeout}s"
            except openai.APIConnectionError as exc:
                call.outcome, retry, wait, detail = "connection", True, None, f"cannot reach {self.server}: {exc}"
            if not retry or attempt == self.settings.retries:
                raise LLMError(f"model call failed after {call.attempts} attempt(s): {call.outcome}: {detail}",
                               call.outcome, call)
            time.sleep(wait if wait is not None else self._backoff(attempt))
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int) -> float:
        base = self.settings.backoff * (2 ** attempt)
        return base + random.uniform(0, self.settings.backoff)


def _reply(response: Any, call: Call) -> Reply:
    """The first choice of a chat completion, and its token counts written into the call."""
    usage = getattr(response, "usage", None)
    call.prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    call.completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    choices = getattr(response, "choices", None) or []
    if not choices:
        call.outcome = "bad-response"
        raise LLMError("the server answered without a choice", "bad-response", call)
    message = choices[0].message
    calls = [ToolCall(id=t.id or f"call_{i}", name=t.function.name or "", arguments=t.function.arguments or "")
             for i, t in enumerate(message.tool_calls or []) if getattr(t, "function", None) is not None]
    return Reply(content=message.content or "", tool_calls=calls, finish_reason=choices[0].finish_reason or "",
                 refusal=getattr(message, "refusal", None))


def _retry_after(exc: openai.APIStatusError) -> float | None:
    try:
        value = float(exc.response.headers.get("retry-after", ""))
    except (TypeError, ValueError):
        return None
    return min(max(value, 0.0), MAX_RETRY_AFTER)


def _error_text(exc: openai.APIStatusError) -> str:
    text = str(exc.message or exc).strip().splitlines()
    return text[0][:300] if text else ""
