"""Local generation with transformers' ``generate()`` and the model's chat template."""

from __future__ import annotations

import importlib.util
import logging
import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from wetqa.settings import setting

from .._base import (
    OPEN_MODEL_DEFAULTS,
    BackendBase,
    ContextOverflowError,
    Generation,
    GenerationError,
    ModelSettings,
    Request,
    Usage,
    failure_of,
    template_kwargs,
)
from ..registry import BackendInfo, register

DTYPES = ("auto", "float32", "float16", "bfloat16")
log = logging.getLogger("wetqa.generation.transformers")


def split_gguf(model: str, gguf_file: str | None = None) -> tuple[str, str | None]:
    """A path to a ``.gguf`` file loads as (its folder, the file name), like ``gguf_file=``."""
    if gguf_file is None and model.endswith(".gguf"):
        import os

        return os.path.dirname(model) or ".", os.path.basename(model)
    return model, gguf_file


def chat_prompt(tokenizer, messages: list[dict], **kwargs):
    """``apply_chat_template`` with the generation prompt; a template without a system role (it raises
    on one) gets the system text at the head of the first user message instead."""
    try:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, **kwargs)
    except Exception as exc:  # noqa: BLE001 - jinja2's TemplateError or a ValueError, by template
        if not messages or messages[0]["role"] != "system" or "system" not in str(exc).lower():
            raise
    system, first, *rest = messages
    merged = {**first, "content": f"{system['content']}\n\n{first['content']}"}
    return tokenizer.apply_chat_template([merged, *rest], add_generation_prompt=True, **kwargs)


def torch_dtype_for(dtype: str, device: str):
    """The weights' dtype: as asked, or for ``auto`` bf16 (fp16 where bf16 is not supported) on a GPU
    and fp32 on a CPU, where half precision is slow or unsupported."""
    import torch

    if dtype != "auto":
        return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    if str(device).startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


@dataclass(frozen=True, slots=True)
class TransformersSettings(ModelSettings):
    dtype: str = setting(
        "auto", "weights' precision (auto: bf16/fp16 on a GPU, fp32 on a CPU)", choices=DTYPES, output=True
    )


class TransformersBackend(BackendBase):
    def __init__(self, settings: TransformersSettings, device: str | None = None, gguf_file: str | None = None):
        self.model_name = settings.model
        model, temperature, top_k, max_tokens, dtype = (
            settings.model,
            settings.temperature,
            settings.top_k,
            settings.max_tokens,
            settings.dtype,
        )
        self.settings = settings
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise GenerationError("the transformers backend needs torch and transformers") from None
        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model, gguf_file = split_gguf(model, gguf_file)
        kwargs = {"gguf_file": gguf_file} if gguf_file else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model, **kwargs)
            torch_dtype = torch_dtype_for(dtype, self.device)
            self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype, **kwargs).to(self.device)
        except OSError as exc:
            raise GenerationError(f"cannot load model {model!r}: {exc}") from None
        self.model.eval()
        self._lock = threading.Lock()
        if self.tokenizer.chat_template is None:
            raise GenerationError(f"model {model!r} has no chat template; give an instruct/chat model")
        self.name = f"transformers:{model}"
        self.temperature = temperature
        self.top_k = top_k
        self.max_tokens = max_tokens
        cfg = self.model.config
        self.context = int(getattr(cfg, "max_position_embeddings", 0) or self.tokenizer.model_max_length)
        # Structured answers need llguidance (vLLM's guidance engine, in the dense extra) and a fast tokenizer.
        self.structured = settings.structured and _can_constrain(self.tokenizer)
        self._lltokenizer = None

    # Per request: sampling temperature, a cap on new tokens, stop strings (transformers' stop_strings),
    # a seed for the sampler, and the first token's most likely alternatives (read from the logits).
    supports = frozenset({"temperature", "max_tokens", "stop", "seed", "logprobs"})

    def _prepare(self, request: Request) -> tuple:
        """The prompt's token ids, their count, and generate()'s settings for this request."""
        kwargs = template_kwargs(self.settings)
        ids = chat_prompt(self.tokenizer, request.messages, return_tensors="pt", return_dict=True, **kwargs)
        ids = ids["input_ids"].to(self.device)
        n_prompt = int(ids.shape[1])
        room = self.context - n_prompt
        if room <= 0:
            raise ContextOverflowError(
                f"context overflow: the prompt has {n_prompt} tokens, the model's context window {self.context}; "
                "retrieve fewer chunks (-k)"
            )
        s = request.sampling
        temperature = self.temperature if s.temperature is None else s.temperature
        # The published 5000 tokens (or the request's cap), capped by the window.
        max_new = min(self.max_tokens if s.max_tokens is None else s.max_tokens, room)
        sample = temperature > 0
        gen_kwargs: dict = {
            "max_new_tokens": max_new,
            "do_sample": sample,
            "pad_token_id": self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
        }
        if sample:
            gen_kwargs.update(temperature=temperature, top_k=self.top_k)
        if s.stop:
            gen_kwargs.update(stop_strings=list(s.stop), tokenizer=self.tokenizer)
        if s.seed is not None:
            self.torch.manual_seed(s.seed)  # under the lock: no other request draws from the generator meanwhile
        if request.schema is not None:
            gen_kwargs["logits_processor"] = [SchemaConstraint(self._llg_tokenizer(), request.schema)]
        return ids, n_prompt, gen_kwargs

    def _llg_tokenizer(self):
        """llguidance's view of the tokenizer (about a second to build, so once), ending at the model's EOS."""
        if self._lltokenizer is None:
            import llguidance.hf

            eos = self.model.generation_config.eos_token_id
            self._lltokenizer = llguidance.hf.from_tokenizer(self.tokenizer, eos_token=eos)
        return self._lltokenizer

    def _finish(self, out, n_prompt: int, max_new: int, t0: float) -> Generation:
        new = out[0, n_prompt:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        n_new = int(new.shape[0])
        eos = self.tokenizer.eos_token_id
        ended = n_new > 0 and eos is not None and int(new[-1]) == eos
        return Generation(
            text=text,
            usage=Usage(n_prompt, n_new),
            seconds=time.perf_counter() - t0,
            finish_reason="length" if n_new >= max_new and not ended else "stop",
        )

    def _one(self, request: Request) -> Generation:
        t0 = time.perf_counter()
        # One model and one tokenizer serve every thread: a fast tokenizer used from two threads at
        # once fails ("Already borrowed"), and two generate() calls would only compete for the cores.
        top = request.sampling.logprobs
        with self._lock:
            ids, n_prompt, gen_kwargs = self._prepare(request)
            if top:
                gen_kwargs.update(output_logits=True, return_dict_in_generate=True)
            with self.torch.no_grad():
                out = self.model.generate(ids, attention_mask=self.torch.ones_like(ids), **gen_kwargs)
            if not top:
                return self._finish(out, n_prompt, gen_kwargs["max_new_tokens"], t0)
            gen = self._finish(out.sequences, n_prompt, gen_kwargs["max_new_tokens"], t0)
            gen.top_logprobs = self._top_logprobs(out.sequences[0, n_prompt:], out.logits, top)
            return gen

    def _top_logprobs(self, new_ids, logits, n: int) -> dict[str, float]:
        """The ``n`` most likely tokens at the first step whose chosen token is not blank; tokens that
        read the same (with and without a word-start marker) are one entry, their probabilities summed."""
        steps = len(logits)
        step = next((i for i in range(steps) if self.tokenizer.decode([int(new_ids[i])]).strip()), 0)
        values, indices = self.torch.log_softmax(logits[step][0].float(), dim=-1).topk(n)
        out: dict[str, float] = {}
        for value, index in zip(values.tolist(), indices.tolist()):
            token = self.tokenizer.decode([index])
            out[token] = math.log(math.exp(out[token]) + math.exp(value)) if token in out else value
        return out

    def stream(self, request: Request) -> Iterator[str | Generation]:
        """Text as generate() produces it (transformers' TextIteratorStreamer), then the Generation.

        Closing the iterator stops generate() at its next token.
        """
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        t0 = time.perf_counter()
        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        cancelled = threading.Event()
        torch = self.torch

        class Cancelled(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), cancelled.is_set(), dtype=torch.bool)

        result: dict = {}

        def run() -> None:
            try:
                with self._lock:
                    if cancelled.is_set():
                        return
                    ids, n_prompt, gen_kwargs = self._prepare(request)
                    with torch.no_grad():
                        out = self.model.generate(
                            ids,
                            attention_mask=torch.ones_like(ids),
                            streamer=streamer,
                            stopping_criteria=StoppingCriteriaList([Cancelled()]),
                            **gen_kwargs,
                        )
                    result["generation"] = self._finish(out, n_prompt, gen_kwargs["max_new_tokens"], t0)
            except Exception as exc:  # noqa: BLE001 - re-raised in the consuming thread below
                result["error"] = exc
            finally:
                streamer.on_finalized_text("", stream_end=True)  # wakes the consumer whatever happened

        worker = threading.Thread(target=run, name="wetqa-generate", daemon=True)
        worker.start()
        try:
            for text in streamer:
                if text:
                    yield text
        finally:
            cancelled.set()
            worker.join()
        if "error" in result:
            exc = result["error"]
            if isinstance(exc, GenerationError):
                yield Generation(error=str(exc), seconds=time.perf_counter() - t0, failure=failure_of(exc))
                return
            raise exc
        yield result["generation"]

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        out = []
        for r in requests:
            try:
                out.append(self._one(r))
            except GenerationError as exc:  # a prompt over the window, a schema that does not compile
                out.append(Generation(error=str(exc), failure=failure_of(exc)))
        return out


def _can_constrain(tokenizer) -> bool:
    if importlib.util.find_spec("llguidance") is None:
        log.warning(
            "wetqa: warning: structured answers with transformers need llguidance (pip install llguidance); "
            "answering in the text format"
        )
        return False
    return bool(getattr(tokenizer, "is_fast", False))


class SchemaConstraint:
    """A logits processor that holds generate() to a JSON schema, with llguidance's matcher.

    Before each token it masks every token the schema does not allow next (whitespace between JSON
    tokens included: a small model would fill its answer with new lines); once the JSON is complete
    only the end of sequence is left.
    """

    def __init__(self, lltokenizer, schema: dict):
        from llguidance import LLMatcher
        from llguidance.numpy import allocate_token_bitmask

        grammar = LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        self.matcher = LLMatcher(lltokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise GenerationError(f"the answer schema does not compile: {' '.join(self.matcher.get_error().split())}")
        self.bitmask = allocate_token_bitmask(1, lltokenizer.vocab_size)
        self.n_prompt: int | None = None

    def __call__(self, input_ids, scores):
        import numpy as np
        import torch
        from llguidance.numpy import fill_next_token_bitmask

        if self.n_prompt is None:
            self.n_prompt = int(input_ids.shape[1])
        else:
            self.matcher.consume_token(int(input_ids[0, -1]))
        if self.matcher.is_error():  # cannot happen with the mask applied; leave the model free rather than stuck
            return scores
        fill_next_token_bitmask(self.matcher, self.bitmask, 0)
        allowed = np.unpackbits(self.bitmask.view(np.uint8), bitorder="little")[: scores.shape[1]]
        banned = np.ones(scores.shape[1], dtype=bool)  # ids past the tokenizer's vocabulary stay banned
        banned[: allowed.shape[0]] = allowed == 0
        return scores.masked_fill(torch.from_numpy(banned).to(scores.device), float("-inf"))


register(
    BackendInfo(
        name="transformers",
        settings=TransformersSettings,
        create=TransformersBackend,
        supports=TransformersBackend.supports,
        requires=("torch", "transformers"),
        description="a local model with transformers' generate() (also a .gguf file)",
        local_model=True,
        defaults=OPEN_MODEL_DEFAULTS,
    )
)
