"""A fast fake inference server for proxy benchmarks and fault tests (never for model tests).

It speaks Chat Completions the way vLLM, SGLang or NeMo-RL's server do, token fields included,
and misbehaves on request: a user message containing `[fault:NAME]` triggers
  http500 | http400_overflow | reset | timeout | cut | no_token_ids | tool_call | slow | echo (the last message)
  | one_write (a stream's events all in one write, as a busy server's queue up)
Tokens are numbered words ("w0 w1 ..."), one per token; `token_delay_s` spaces streamed tokens.

`history=True` plays a long agent session's server (`polar bench long`): the prompt ids cover the whole
history, each message encoded once (`HistoryIds`), so a call's prompt extends the previous call's prompt +
sample exactly as a real server's does; every answer is the next tool call of the session, its id and
arguments numbered by the turn.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import zlib
from collections import deque
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

_FAULT = re.compile(r"\[fault:([a-z0-9_]+)\]")
SERVED_MODEL = "fake-policy"  # like vLLM, the one name it serves; any other is a 404


def _fault(body: dict[str, Any]) -> str | None:
    for m in reversed(body.get("messages") or []):
        content = m.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content or "").decode()
        found = _FAULT.search(text)
        if found:
            return found.group(1)
    return None


def _last_text(body: dict[str, Any]) -> str:
    content = (body.get("messages") or [{}])[-1].get("content")
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])


def _prompt_ids(body: dict[str, Any]) -> list[int]:
    # deterministic stand-in: one id per byte of the rendered messages, folded into a small vocab
    raw = orjson.dumps(body.get("messages"), option=orjson.OPT_SORT_KEYS)
    return [b % 251 + 5 for b in raw[:4096]]


class HistoryIds:
    """Token ids of a ChatML-rendered history, each message encoded once (a session re-sends them all).

    A message is `<|im_start|>` + role line + body + `<|im_end|>` + newline, each piece encoded on its own,
    and a sample is its body + `<|im_end|>`: the next prompt extends prompt + sample exactly. Ids come from
    a tokenizer (`tokenizer.json` in `tokenizer_dir`, the tiny model's) or, without one, one made-up id per
    16 bytes of text.
    """

    def __init__(self, tokenizer_dir: str | Path | None = None):
        self._encode = _sixteen_bytes
        self.bot, self.eot = 1, 2
        if tokenizer_dir is not None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
            self._encode = lambda text: tok.encode(text, add_special_tokens=False).ids
            self.bot, self.eot = tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>")
        self._pieces: dict[str, list[int]] = {}
        self.generation_prompt = [self.bot, *self.encode("assistant\n")]

    def encode(self, text: str) -> list[int]:
        ids = self._pieces.get(text)
        if ids is None:
            ids = self._pieces[text] = self._encode(text)
        return ids

    def prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        ids: list[int] = []
        for m in messages:
            ids += [self.bot, *self.encode(f"{m.get('role')}\n"), *self.encode(body_text(m)), self.eot]
            ids += self.encode("\n")
        return ids + self.generation_prompt

    def sample(self, message: dict[str, Any]) -> list[int]:
        return [*self.encode(body_text(message)), self.eot]


def body_text(message: dict[str, Any]) -> str:
    """What a message renders as between its role line and `<|im_end|>`: its text, or its tool calls."""
    calls = message.get("tool_calls")
    if calls:
        named = ((c["function"]["name"], c["function"]["arguments"]) for c in calls)
        return "\n".join(f'<tool_call>\n{{"name": "{n}", "arguments": {a}}}\n</tool_call>' for n, a in named)
    content = message.get("content")
    return content if isinstance(content, str) else orjson.dumps(content).decode()


def _sixteen_bytes(text: str) -> list[int]:
    raw = text.encode()
    return [zlib.crc32(raw[i : i + 16]) % 4000 + 100 for i in range(0, len(raw), 16)]


def history_turn(messages: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    """The session's next assistant message: a tool call numbered by the turn."""
    turn = sum(m.get("role") == "assistant" for m in messages)
    command = f"sed -n {turn * 40 + 1},{turn * 40 + 40}p src/module_{turn % 7}.py"
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": tool, "arguments": orjson.dumps({"command": command}).decode()},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class FakeUpstream:
    def __init__(
        self,
        engine: str = "vllm",
        tokens: int = 16,
        token_delay_s: float = 0.0,
        keep: int = 256,
        served_model: str = SERVED_MODEL,
        weight_version: str | None = None,
        history: bool = False,
        tokenizer_dir: str | Path | None = None,
    ):
        self.engine = engine
        self.history = HistoryIds(tokenizer_dir) if history else None
        self.served_model = served_model
        self.weight_version = weight_version  # like SGLang, reported in each answer's metadata when set
        self.tokens = tokens
        self.token_delay_s = token_delay_s
        self.requests: deque[dict[str, Any]] = deque(maxlen=keep)
        self.app = web.Application(client_max_size=256 * 2**20)
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/_requests", self.list_requests)
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self.runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.served_model, "object": "model"}]})

    async def list_requests(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(list(self.requests)), content_type="application/json")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        if body.get("model") != self.served_model:
            message = f"The model `{body.get('model')}` does not exist."
            return web.json_response({"error": {"message": message, "type": "NotFoundError", "code": 404}}, status=404)
        fault = _fault(body)
        if fault == "http500":
            return web.json_response(
                {"error": {"message": "engine crashed", "type": "InternalServerError"}}, status=500
            )
        if fault == "http400_overflow":
            return web.json_response(
                {"error": {"message": "This model's maximum context length is 32 tokens"}}, status=400
            )
        if fault == "reset":
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if fault == "timeout":
            await asyncio.sleep(3600)
        if self.history is not None and not body.get("stream"):
            return self._history_answer(body)
        if self.engine == "nemo_rl" and (body.get("top_p") is None or body.get("top_k") not in (None, -1)):
            return web.json_response({"error": {"message": "top_p must be set and top_k unset"}}, status=500)
        n = min(body.get("max_tokens") or self.tokens, self.tokens)
        words = [f"w{i}" for i in range(n)]
        if fault == "echo":  # the answer repeats the last message word for word (a model echoing its input)
            words = _FAULT.sub("", _last_text(body)).split()[:n] or ["-"]
            n = len(words)
        ids = list(range(1000, 1000 + n))
        logprobs = [-0.25 - i / 100 for i in range(n)]
        tool = fault == "tool_call" and body.get("tools")
        if body.get("stream"):
            return await self._stream(request, body, words, ids, logprobs, fault, tool)
        message: dict[str, Any] = {"role": "assistant", "content": " ".join(words)}
        if tool:
            message = {"role": "assistant", "content": None, "tool_calls": [self._call(body)]}
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "length"}
        out = _answer(body, choice, len(_prompt_ids(body)), n)
        if fault != "no_token_ids":
            self._token_fields(out, choice, _prompt_ids(body), ids, logprobs)
        if self.weight_version is not None:
            out["metadata"] = {"weight_version": self.weight_version}
        if fault == "slow":
            await asyncio.sleep(1.0)
        elif self.token_delay_s:
            await asyncio.sleep(self.token_delay_s * n)  # a whole answer takes as long as its tokens
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    def _history_answer(self, body: dict[str, Any]) -> web.Response:
        assert self.history is not None
        messages = body.get("messages") or []
        message = history_turn(
            messages, (body.get("tools") or [{"function": {"name": "bash"}}])[0]["function"]["name"]
        )
        prompt, ids = self.history.prompt(messages), self.history.sample(message)
        logprobs = [-0.25 - (i % 50) / 100 for i in range(len(ids))]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        out = _answer(body, choice, len(prompt), len(ids))
        self._token_fields(out, choice, prompt, ids, logprobs)
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    def _call(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["tools"][0]["function"]["name"]
        return {"id": "call_fake", "type": "function", "function": {"name": name, "arguments": '{"command": "ls"}'}}

    def _token_fields(self, out, choice, prompt, ids, logprobs) -> None:
        if self.engine == "vllm":
            out["prompt_token_ids"] = prompt
            choice["token_ids"] = ids
            choice["logprobs"] = {"content": [{"token": f"w{i}", "logprob": lp} for i, lp in enumerate(logprobs)]}
        elif self.engine == "sglang":
            choice["prompt_token_ids"] = prompt
            triples = [[lp, t, None] for t, lp in zip(ids, logprobs, strict=True)]
            choice["meta_info"] = {"output_token_logprobs": triples}
        elif self.engine == "nemo_rl":
            msg = choice["message"]
            msg.update(prompt_token_ids=prompt, generation_token_ids=ids, generation_log_probs=logprobs)

    async def _stream(self, request, body, words, ids, logprobs, fault, tool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        base = {
            "id": "fake-1",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model"),
        }

        held: list[bytes] | None = [] if fault == "one_write" else None

        async def send(obj: dict[str, Any]) -> None:
            event = b"data: " + orjson.dumps(obj) + b"\n\n"
            if held is None:
                await resp.write(event)
            else:
                held.append(event)

        first = dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}])
        if fault != "no_token_ids":
            first["prompt_token_ids"] = _prompt_ids(body)
        if self.weight_version is not None:
            first["metadata"] = {"weight_version": self.weight_version}
        await send(first)
        if tool:
            call = self._call(body)
            await send(
                dict(
                    base,
                    choices=[
                        {
                            "index": 0,
                            "delta": {"tool_calls": [dict(call, index=0)]},
                            "token_ids": ids[:1],
                            "logprobs": {"content": [{"logprob": logprobs[0]}]},
                        }
                    ],
                )
            )
            words, ids, logprobs = [], ids[1:], logprobs[1:]
        for i, (w, t, lp) in enumerate(zip(words or [""] * len(ids), ids, logprobs, strict=True)):
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            if fault == "cut" and i == len(ids) // 2:
                assert request.transport is not None
                request.transport.abort()
                return resp
            choice: dict[str, Any] = {"index": 0, "delta": {"content": (" " if i else "") + w} if w else {}}
            if fault != "no_token_ids":
                choice["token_ids"] = [t]
                choice["logprobs"] = {"content": [{"token": w, "logprob": lp}]}
            await send(dict(base, choices=[choice]))
        await send(
            dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls" if tool else "length"}])
        )
        await send(
            dict(base, choices=[], usage={"prompt_tokens": len(_prompt_ids(body)), "completion_tokens": len(ids)})
        )
        await resp.write(b"".join(held or ()) + b"data: [DONE]\n\n")
        return resp


def _answer(body: dict[str, Any], choice: dict[str, Any], prompt_tokens: int, completion_tokens: int) -> dict:
    """A whole Chat Completions answer around its one choice."""
    return {
        "id": "fake-1",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


class FakeUpstreamThread:
    """The fake upstream on its own thread and event loop."""

    def __init__(self, **kwargs: Any):
        self.fake = FakeUpstream(**kwargs)
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-upstream", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self.url = self._loop.run_until_complete(self.fake.start())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> FakeUpstreamThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        # close connections and cancel handlers (a "timeout" fault sleeps) before the loop stops
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description="fake inference server (proxy benchmarks and fault tests)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--engine", default="vllm")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--token-delay-ms", type=float, default=0.0)
    p.add_argument("--history", action="store_true", help="a long session's server: whole-history prompt ids")
    p.add_argument("--tokenizer", default=None, help="with --history: a tokenizer folder for real ids")
    a = p.parse_args()
    fake = FakeUpstream(
        engine=a.engine,
        tokens=a.tokens,
        token_delay_s=a.token_delay_ms / 1000,
        history=a.history,
        tokenizer_dir=a.tokenizer,
    )
    web.run_app(fake.app, host="127.0.0.1", port=a.port, access_log=None, print=None, backlog=4096)


if __name__ == "__main__":
    main()
