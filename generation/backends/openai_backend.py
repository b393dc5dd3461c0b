"""The OpenAI API and any OpenAI-compatible server (vLLM, llama.cpp, wetqa's own endpoint).

Requests run concurrently; the ``openai`` client retries with exponential
back-off on connection errors, 429 and 5xx; each call has a timeout. Token
usage is logged per request and in total. One failing request is recorded
as failed and the rest of the batch goes on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from .._base import Generation, GenerationError, Request, Usage

log = logging.getLogger("wetqa.generation.openai")


class OpenAIBackend:
    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 1000,
        top_p: float | None = None,
        top_k: int | None = None,
        concurrency: int = 8,
        max_retries: int = 4,
        timeout: float = 120.0,
    ):
        try:
            import openai
        except ImportError:
            raise GenerationError("the openai backend needs `pip install wetqa[openai]`") from None
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if base_url is None:
                raise GenerationError(
                    "no OpenAI API key: set OPENAI_API_KEY (or pass --base-url for an OpenAI-compatible server)"
                )
            api_key = "not-needed"  # local servers usually ignore the key, but the client wants one
        self.model = model
        self.base_url = base_url
        self.name = f"openai:{model}"
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.top_p = top_p
        self.top_k = top_k
        self.concurrency = max(1, concurrency)
        self._openai = openai
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=timeout)
        self.total = Usage()

    def _one(self, request: Request) -> Generation:
        o = self._openai
        t0 = time.perf_counter()
        kwargs: dict = {
            "model": self.model,
            "messages": request.messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if self.top_k is not None and self.base_url:
            kwargs["extra_body"] = {"top_k": self.top_k}  # vLLM and llama.cpp accept it; the OpenAI API does not
        try:
            resp = self._client.chat.completions.create(**kwargs)
        except o.APITimeoutError:
            return Generation(error=f"the model server timed out ({self._where()})", seconds=time.perf_counter() - t0)
        except o.APIConnectionError as exc:
            return Generation(
                error=f"cannot reach the model server at {self._where()}: {exc.__cause__ or exc}",
                seconds=time.perf_counter() - t0,
            )
        except o.AuthenticationError:
            return Generation(
                error=f"the model server rejected the API key ({self._where()})", seconds=time.perf_counter() - t0
            )
        except o.BadRequestError as exc:
            msg = str(getattr(exc, "message", exc))
            if "context" in msg.lower() or "too long" in msg.lower() or "maximum" in msg.lower():
                msg = f"context overflow: the prompt does not fit the model's context window ({msg})"
            return Generation(error=msg, seconds=time.perf_counter() - t0)
        except o.APIStatusError as exc:
            return Generation(
                error=f"model server error {exc.status_code}: {getattr(exc, 'message', exc)}",
                seconds=time.perf_counter() - t0,
            )
        except o.APIResponseValidationError:
            resp = None
        if not hasattr(resp, "choices"):
            # An answer of 200 whose body is not a chat completion (an HTML error page, plain text).
            return Generation(
                error=f"the model server at {self._where()} answered with something that is not an OpenAI chat "
                "completion (not JSON)",
                seconds=time.perf_counter() - t0,
            )
        text = resp.choices[0].message.content or "" if resp.choices else ""
        usage = Usage(resp.usage.prompt_tokens, resp.usage.completion_tokens) if resp.usage else Usage()
        log.info("%s: %d prompt + %d completion tokens", self.model, usage.prompt_tokens, usage.completion_tokens)
        return Generation(text=text, usage=usage, seconds=time.perf_counter() - t0)

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
