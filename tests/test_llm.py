"""The model client against a real local HTTP server speaking the OpenAI protocol (tests/openai_server.py):
retries on 429 and 5xx with backoff, timeouts, refusals, the request cache, token budgets, the
concurrency limit, and the JSON formats servers understand."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from openai_server import ScriptedServer, refuse, say, slow, status, tool

from miner.llm import BudgetExhausted, LLMClient, LLMError, LLMSettings, TokenBudget

HELLO = [{"role": "user", "content": "hello"}]


def client_for(server: ScriptedServer, cache: Path | None = None, budget: TokenBudget | None = None,
               **settings: object) -> LLMClient:
    options = {"model": "scripted", "base_url": server.url, "api_key": "test", "timeout": 5.0, "retries": 2,
               "backoff": 0.01, **settings}
    return LLMClient(LLMSettings(**options), cache_dir=cache, budget=budget)


def test_a_reply_comes_back_with_its_tool_calls_and_accounting() -> None:
    with ScriptedServer([tool("shell", command="ls -la")]) as server:
        reply = client_for(server).chat(HELLO, tools=[{"type": "function", "function": {"name": "shell"}}])
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("shell", '{"command": "ls -la"}')]
    call = reply.call
    assert call.outcome == "ok" and call.attempts == 1 and not call.cached
    assert call.prompt_tokens > 0 and call.completion_tokens > 0 and call.latency > 0
    assert server.requests[0]["model"] == "scripted" and server.requests[0]["tools"][0]["function"]["name"] == "shell"
    assert server.requests[0]["seed"] == 0 and server.requests[0]["temperature"] == 0.0


def test_429_then_success_is_retried_honouring_retry_after() -> None:
    with ScriptedServer([status(429, retry_after=0.2), say("fine")]) as server:
        start = time.monotonic()
        reply = client_for(server).chat(HELLO)
    assert reply.content == "fine" and reply.call.attempts == 2 and reply.call.outcome == "ok"
    assert time.monotonic() - start >= 0.2 and len(server.requests) == 2


def test_5xx_until_the_retries_run_out_is_an_error_naming_the_status() -> None:
    with ScriptedServer([status(503)] * 3) as server:
        with pytest.raises(LLMError) as caught:
            client_for(server, retries=2).chat(HELLO)
    assert caught.value.outcome == "http-503" and caught.value.call.attempts == 3 and len(server.requests) == 3


def test_a_client_error_is_not_retried() -> None:
    with ScriptedServer([status(400), say("never asked")]) as server:
        with pytest.raises(LLMError) as caught:
            client_for(server).chat(HELLO)
    assert caught.value.outcome == "http-400" and len(server.requests) == 1


def test_a_timeout_is_retried_and_a_server_that_never_answers_in_time_is_a_timeout() -> None:
    with ScriptedServer([slow(3, say("too late")), say("in time")]) as server:
        reply = client_for(server, timeout=1.0).chat(HELLO)
    assert reply.content == "in time" and reply.call.attempts == 2
    with ScriptedServer([slow(3, say("late"))] * 2) as server:
        with pytest.raises(LLMError) as caught:
            client_for(server, timeout=1.0, retries=1).chat(HELLO)
    assert caught.value.outcome == "timeout"


def test_a_refusal_is_reported_as_such() -> None:
    with ScriptedServer([refuse()]) as server:
        reply = client_for(server).chat(HELLO)
    assert reply.refused and reply.call.outcome == "refused" and "can't" in reply.refusal


def test_the_cache_answers_the_same_request_without_the_server_and_for_no_tokens(tmp_path: Path) -> None:
    with ScriptedServer([say("first"), say("other seed")]) as server:
        first = client_for(server, cache=tmp_path).chat(HELLO)
        again = client_for(server, cache=tmp_path).chat(HELLO)  # a new client: the cache is on disk
        other = client_for(server, cache=tmp_path, seed=1).chat(HELLO)
    assert first.call.tokens > 0 and not first.call.cached
    assert again.content == "first" and again.call.cached and again.call.tokens == 0
    assert again.call.outcome == "cached" and again.call.attempts == 0
    assert other.content == "other seed" and len(server.requests) == 2


def test_a_spent_budget_stops_calls_before_they_reach_the_server() -> None:
    crawl = TokenBudget(limit=None)
    goal = TokenBudget(limit=5, parent=crawl, name="goal")
    with ScriptedServer([say("a long enough answer to cost tokens"), say("never")]) as server:
        client = client_for(server, budget=crawl)
        first = client.chat(HELLO, budget=goal)
        with pytest.raises(BudgetExhausted):
            client.chat(HELLO + [{"role": "user", "content": "more"}], budget=goal)
    assert len(server.requests) == 1 and goal.spent == crawl.spent == first.call.tokens > 5


def test_no_more_calls_are_in_flight_than_the_concurrency_limit() -> None:
    lock, live, peak = threading.Lock(), [0], [0]

    def counted(body: dict) -> dict:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.3)
        with lock:
            live[0] -= 1
        return say("ok")

    with ScriptedServer([counted] * 6) as server:
        client = client_for(server, concurrency=2)
        threads = [threading.Thread(target=client.chat, args=([{"role": "user", "content": str(i)}],))
                   for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert peak[0] == 2 and len(server.requests) == 6


def test_json_formats_as_each_kind_of_server_takes_them() -> None:
    schema = {"type": "object"}
    make = lambda mode: LLMClient(LLMSettings(model="m", json_mode=mode))  # noqa: E731
    assert make("off").json_format(schema) is None
    assert make("schema").json_format(schema) == {"type": "json_schema", "json_schema": {"name": "reply",
                                                                                         "schema": schema}}
    assert make("object").json_format(schema) == {"type": "json_object", "schema": schema}
