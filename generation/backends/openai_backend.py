"""The OpenAI API and any OpenAI-compatible server (vLLM, llama.cpp, wetqa's own endpoint).

Requests run concurrently; the ``openai`` client retries with exponential
back-off on connection errors, 429 and 5xx; each call has a timeout. Token
usage is logged per request and in total. One failing request is recorded
as failed and the rest of the batch goes on.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from wetqa.console import install_command
from wetqa.settings import setting

from .._base import BackendBase, Generation, GenerationError, ModelSettings, Request, Usage, template_kwargs
from ..registry import BackendInfo, register
from ..structured import SCHEMA_NAME, portable

log = logging.getLogger("wetqa.generation.openai")


@dataclass(frozen=True, slots=True)
class OpenAISettings(ModelSettings):
    base_url: str | None = setting(None, "OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1", metavar="URL")
    api_key_env: str = setting("OPENAI_API_KEY", "environment variable that holds the server's API key", metavar="NAME")
    top_p: float | None = setting(
        None, "nucleus sampling: the most likely tokens up to this mass", above=0, maximum=1, output=True
    )
    concurrency: int = setting(8, "requests to the model server under way at once", minimum=1)
    timeout: float = setting(120.0, "seconds a model request may take", above=0)
    max_retries: int = setting(4, "retries of a failed request (connection errors, 429, 5xx)", minimum=0)


class OpenAIBackend(BackendBase):
    def __init__(self, settings: OpenAISettings):
        self.model_name = settings.model
        self._aclient_loop = None  # the event loop the async client belongs to (one client per loop)
        try:
            import openai
        except ImportError:
            raise GenerationError(f"the openai backend needs the openai package: {install_command('openai')}") from None
        s = settings
        base_url = s.base_url or os.environ.get("OPENAI_BASE_URL") or None  # an empty variable is no URL given
        if base_url is not None and not base_url.lower().startswith(("http://", "https://")):
            given = "the server URL" if s.base_url else "OPENAI_BASE_URL"  # --base-url, --llm-base-url, a TOML key
            raise GenerationError(
                f"{given} {base_url} is not an http(s) URL: give the server's, e.g. http://127.0.0.1:8000/v1"
            )
        api_key = os.environ.get(s.api_key_env)
        if not api_key:
            if base_url is None:
                raise GenerationError(
                    f"no OpenAI API key: set {s.api_key_env} (or pass --base-url for an OpenAI-compatible server)"
                )
            api_key = "not-needed"  # local servers usually ignore the key, but the client wants one
        self.settings = s
        self.model = s.model
        self.base_url = base_url
        self.name = f"openai:{s.model}"
        self.temperature = s.temperature
        self.max_tokens = s.max_tokens
        self.top_p = s.top_p
        self.top_k = s.top_k
        self.concurrency = max(1, s.concurrency)
        # Structured answers through response_format json_schema (vLLM, llama.cpp, the OpenAI API); a
        # server that refuses it makes the pipeline fall back to the text format.
        self.structured = s.structured
        self._openai = openai
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=s.max_retries, timeout=s.timeout)
        self.total = Usage()

    # Every per-request setting passes through to the server, which applies (or refuses) it.
    supports = frozenset({"temperature", "max_tokens", "stop", "seed", "logprobs"})

    def _kwargs(self, request: Request) -> dict:
        s = request.sampling
        kwargs: dict = {
            "model": self.model,
            "messages": request.messages,
            "temperature": self.temperature if s.temperature is None else s.temperature,
            "max_tokens": self.max_tokens if s.max_tokens is None else s.max_tokens,
        }
        if s.stop:
            kwargs["stop"] = list(s.stop)
        if s.seed is not None:
            kwargs["seed"] = s.seed
        if s.logprobs:
            kwargs.update(logprobs=True, top_logprobs=s.logprobs)
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        extra: dict = {}
        if self.top_k is not None and self.base_url:
            extra["top_k"] = self.top_k  # vLLM and llama.cpp accept it; the OpenAI API does not
        if self.settings.thinking is not None and self.base_url:
            extra["chat_template_kwargs"] = template_kwargs(self.settings)  # vLLM's and SGLang's way
        if extra:
            kwargs["extra_body"] = extra
        if request.schema is not None:
            # The OpenAI API's strict mode refuses string lengths; servers at a base URL (vLLM, llama.cpp)
            # take the whole schema, bounds that keep a small model from looping included.
            schema = request.schema if self.base_url else portable(request.schema)
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True},
            }
        return kwargs

    def _failure(self, exc: Exception) -> str | None:
        """What went wrong, for an error the client raised; None for one it does not know."""
        o = self._openai
        if isinstance(exc, o.APITimeoutError):
            return f"the model server timed out ({self._where()})"
        if isinstance(exc, o.APIConnectionError):
            return f"cannot reach the model server at {self._where()}: {exc.__cause__ or exc}"
        if isinstance(exc, o.AuthenticationError):
            return f"the model server rejected the API key ({self._where()})"
        if isinstance(exc, o.BadRequestError):
            if self._overflows(exc):
                return f"context overflow: the prompt does not fit the model's context window ({exc.message})"
            return exc.message
        if isinstance(exc, o.APIStatusError):
            return f"model server error {exc.status_code}: {exc.message}"
        if isinstance(exc, o.APIError):  # an error event inside a stream (vLLM's "EngineCore encountered an issue")
            return f"model server error: {exc.message}"
        return None

    def _overflows(self, exc: Exception) -> bool:
        """A 400 saying the prompt does not fit: OpenAI's typed code, or (vLLM sends none) its message."""
        if not isinstance(exc, self._openai.BadRequestError):
            return False
        return exc.code == "context_length_exceeded" or bool(_CONTEXT_OVERFLOW.search(exc.message))

    def _not_a_completion(self) -> str:
        # An answer of 200 whose body is not a chat completion (an HTML error page, plain text).
        return f"the model server at {self._where()} answered with something that is not an OpenAI chat completion (not JSON)"

    def _refuses_schema(self, request: Request, exc: Exception) -> bool:
        """A 400 (or 422) about the answer schema or response_format, for a request that sent one."""
        if request.schema is None or not isinstance(exc, self._openai.APIStatusError):
            return False
        if exc.status_code not in (400, 422):
            return False
        param = exc.body.get("param") if isinstance(exc.body, dict) else None
        return param == "response_format" or bool(_ABOUT_SCHEMA.search(exc.message))

    def _failed(self, request: Request, exc: Exception, t0: float, otherwise: str | None = None) -> Generation:
        """The Generation of a request the client raised for (None-message errors re-raised by callers)."""
        msg = self._failure(exc) or otherwise or self._not_a_completion()
        absent = isinstance(exc, (self._openai.APIConnectionError, self._openai.APITimeoutError))
        refused = self._refuses_schema(request, exc)
        if refused:  # one line: vLLM's grammar errors span several, with a caret under the fault
            msg = f"the model server at {self._where()} refused the answer schema ({' '.join(msg.split())})"
        kind = "timeout" if isinstance(exc, self._openai.APITimeoutError) else "unavailable" if absent else ""
        if not refused and self._overflows(exc):
            kind = "context_overflow"
        return Generation(error=msg, seconds=time.perf_counter() - t0, unavailable=absent, rejected_schema=refused,
                          failure=kind)  # fmt: skip

    def _one(self, request: Request) -> Generation:
        t0 = time.perf_counter()
        try:
            resp = self._client.chat.completions.create(**self._kwargs(request))
        except (self._openai.APIResponseValidationError, ValueError):  # ValueError: a body that is not JSON
            resp = None
        except self._openai.OpenAIError as exc:
            if self._failure(exc) is None:
                raise
            return self._failed(request, exc, t0)
        if not _is_completion(resp):
            return Generation(error=self._not_a_completion(), seconds=time.perf_counter() - t0)
        choice = resp.choices[0]
        text = (choice.message.content or "") if choice else ""
        usage = Usage(resp.usage.prompt_tokens, resp.usage.completion_tokens) if resp.usage else Usage()
        log.info("%s: %d prompt + %d completion tokens", self.model, usage.prompt_tokens, usage.completion_tokens)
        finish = (choice.finish_reason or "stop") if choice else "stop"
        return Generation(
            text=text,
            usage=usage,
            seconds=time.perf_counter() - t0,
            finish_reason=finish,
            top_logprobs=_first_token_logprobs(choice),
        )

    def stream(self, request: Request) -> Iterator[str | Generation]:
        """The upstream's tokens as they arrive (its own stream passed through), then the Generation."""
        state = _StreamState(self, request)
        try:
            chunks = self._client.chat.completions.create(
                **self._kwargs(request), stream=True, stream_options={"include_usage": True}
            )
        except self._openai.OpenAIError as exc:
            yield state.failed(exc)
            return
        try:
            for chunk in chunks:
                out = state.take(chunk)
                yield from out
                if out and isinstance(out[-1], Generation):
                    return
        except self._openai.OpenAIError as exc:
            yield state.failed(exc, "the model server's stream broke off")
            return
        except ValueError:  # an event that is not JSON
            yield state.failed(ValueError(), self._not_a_completion())
            return
        finally:
            # Closing the response tells the upstream to stop generating (a client that left, an error).
            chunks.close()
        yield state.end()

    async def astream(self, request: Request) -> AsyncIterator[str | Generation]:
        """:meth:`stream` on the caller's event loop: a server waits for tokens without a thread each,
        and a client that leaves closes the upstream's stream at once."""
        state = _StreamState(self, request)
        try:
            chunks = await self._async_client().chat.completions.create(
                **self._kwargs(request), stream=True, stream_options={"include_usage": True}
            )
        except self._openai.OpenAIError as exc:
            yield state.failed(exc)
            return
        try:
            async for chunk in chunks:
                out = state.take(chunk)
                for item in out:
                    yield item
                if out and isinstance(out[-1], Generation):
                    return
        except self._openai.OpenAIError as exc:
            yield state.failed(exc, "the model server's stream broke off")
            return
        except ValueError:  # an event that is not JSON
            yield state.failed(ValueError(), self._not_a_completion())
            return
        finally:
            await chunks.close()
        yield state.end()

    def _async_client(self):
        """One AsyncOpenAI per event loop (its connection pool belongs to the loop that opened it)."""
        import asyncio

        loop = asyncio.get_running_loop()
        if self._aclient_loop is not loop:
            c = self._client
            self._aclient = self._openai.AsyncOpenAI(
                base_url=c.base_url, api_key=c.api_key, max_retries=c.max_retries, timeout=c.timeout
            )
            self._aclient_loop = loop
        return self._aclient

    def _where(self) -> str:
        return self.base_url or "api.openai.com"

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        if len(requests) == 1 or self.concurrency == 1:
            out = [self._one(r) for r in requests]
        else:
            with ThreadPoolExecutor(self.concurrency) as pool:
                out = list(pool.map(self._one, requests))
        for g in out:
            self.total.prompt_tokens += g.usage.prompt_tokens
            self.total.completion_tokens += g.usage.completion_tokens
        return out


def _first_token_logprobs(choice) -> dict[str, float]:
    """The alternatives of the first token that is not blank (a server may answer " 4" as " " then "4")."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return {}
    first = next((c for c in content if c.token.strip()), content[0])
    return {t.token: t.logprob for t in first.top_logprobs or []}


# What a server's refusal of the schema says: OpenAI names response_format (and its param), vLLM its
# grammar or schema, llama.cpp the json_schema; other 400s (a prompt too long) do not match.
# vLLM's 400 for a prompt beyond the model's window carries no code, only its message ("This model's maximum
# context length is ...", "... is too long"); OpenAI's carries code context_length_exceeded.
_CONTEXT_OVERFLOW = re.compile(r"context|too long|maximum", re.IGNORECASE)
_ABOUT_SCHEMA = re.compile(r"response_format|json_schema|schema|grammar|structured output|guided", re.IGNORECASE)


def _is_completion(resp) -> bool:
    """A chat completion with at least one choice that has a message (not an error page, not other JSON)."""
    choices = getattr(resp, "choices", None)
    return isinstance(choices, list) and bool(choices) and getattr(choices[0], "message", None) is not None


class _StreamState:
    """What a chat-completion stream has delivered so far; shared by the sync and async readers."""

    def __init__(self, backend: OpenAIBackend, request: Request):
        self.backend, self.request = backend, request
        self.t0 = time.perf_counter()
        self.parts: list[str] = []
        self.usage, self.finish, self.received = Usage(), "stop", 0

    def take(self, chunk) -> list[str | Generation]:
        """The text pieces of one chunk (or a failed Generation, last, when it is not a chunk at all)."""
        self.received += 1
        if not isinstance(getattr(chunk, "choices", None), list) or not all(
            hasattr(c, "delta") and hasattr(c, "finish_reason") for c in chunk.choices
        ):
            return [Generation(error=self.backend._not_a_completion(), seconds=time.perf_counter() - self.t0)]
        if chunk.usage:
            self.usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        out: list[str | Generation] = []
        for choice in chunk.choices:
            piece = choice.delta.content if choice.delta else None
            if piece:
                self.parts.append(piece)
                out.append(piece)
            if choice.finish_reason:
                self.finish = choice.finish_reason
        return out

    def failed(self, exc: Exception, otherwise: str | None = None) -> Generation:
        return self.backend._failed(self.request, exc, self.t0, otherwise)

    def end(self) -> Generation:
        if not self.received:  # a 200 whose body held no server-sent events: not a chat completion stream
            return Generation(error=self.backend._not_a_completion(), seconds=time.perf_counter() - self.t0)
        total = self.backend.total
        total.prompt_tokens += self.usage.prompt_tokens
        total.completion_tokens += self.usage.completion_tokens
        return Generation(
            text="".join(self.parts), usage=self.usage, seconds=time.perf_counter() - self.t0, finish_reason=self.finish
        )


register(
    BackendInfo(
        name="openai",
        settings=OpenAISettings,
        create=OpenAIBackend,
        supports=OpenAIBackend.supports,
        requires=("openai",),
        description="the OpenAI API or any OpenAI-compatible server (vllm serve, llama.cpp, wetqa itself)",
    )
)
