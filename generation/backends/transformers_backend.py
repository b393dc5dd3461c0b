"""Local generation with transformers' ``generate()`` and the model's chat template."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._base import ContextOverflowError, Generation, GenerationError, Request, Usage


def split_gguf(model: str, gguf_file: str | None = None) -> tuple[str, str | None]:
    """A path to a ``.gguf`` file loads as (its folder, the file name), like ``gguf_file=``."""
    if gguf_file is None and model.endswith(".gguf"):
        import os

        return os.path.dirname(model) or ".", os.path.basename(model)
    return model, gguf_file


def torch_dtype_for(dtype: str, device: str):
    """The weights' dtype: as asked, or for ``auto`` bf16 (fp16 where bf16 is not supported) on a GPU
    and fp32 on a CPU, where half precision is slow or unsupported."""
    import torch

    if dtype != "auto":
        return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    if str(device).startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


class TransformersBackend:
    def __init__(
        self,
        model: str,
        temperature: float = 0.2,
        top_k: int | None = 50,
        max_tokens: int = 5000,
        device: str | None = None,
        dtype: str = "auto",
        gguf_file: str | None = None,
    ):
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
        if self.tokenizer.chat_template is None:
            raise GenerationError(f"model {model!r} has no chat template; give an instruct/chat model")
        self.name = f"transformers:{model}"
        self.temperature = temperature
        self.top_k = top_k
        self.max_tokens = max_tokens
        cfg = self.model.config
        self.context = int(getattr(cfg, "max_position_embeddings", 0) or self.tokenizer.model_max_length)

    def _one(self, request: Request) -> Generation:
        t0 = time.perf_counter()
        ids = self.tokenizer.apply_chat_template(
            request.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"].to(self.device)
        n_prompt = int(ids.shape[1])
        room = self.context - n_prompt
        if room <= 0:
            raise ContextOverflowError(
                f"context overflow: the prompt has {n_prompt} tokens, the model's context window {self.context}; "
                "retrieve fewer chunks (-k)"
            )
        max_new = min(self.max_tokens, room)  # the published 5000 tokens, capped by the window
        sample = self.temperature > 0
        gen_kwargs = {
            "max_new_tokens": max_new,
            "do_sample": sample,
            "pad_token_id": self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
        }
        if sample:
            gen_kwargs.update(temperature=self.temperature, top_k=self.top_k)
        with self.torch.no_grad():
            out = self.model.generate(ids, attention_mask=self.torch.ones_like(ids), **gen_kwargs)
        new = out[0, n_prompt:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return Generation(text=text, usage=Usage(n_prompt, int(new.shape[0])), seconds=time.perf_counter() - t0)

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        out = []
        for r in requests:
            try:
                out.append(self._one(r))
            except ContextOverflowError as exc:
                out.append(Generation(error=str(exc)))
        return out
