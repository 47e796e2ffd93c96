"""llama.cpp's grammar engine in the tests, through llama-cpp-python's libllama: a vocabulary of
byte tokens (a GGUF written here, holding nothing but the vocabulary) and a judge that feeds a
text to a fresh grammar sampler byte by byte.

The judge checks every token with the sampler before accepting it (a token the grammar refuses
ends the text: ``reject``), so llama.cpp never raises; at the end, ``accept`` when the grammar
lets the end token through, else ``incomplete`` — the verdicts of the oracle's ``accept`` op.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

__all__ = ["BYTE_OFFSET", "EOS", "LlamaJudge", "write_byte_vocab"]

# token ids: <unk>, <s>, </s>, then byte b is token BYTE_OFFSET + b
EOS = 2
BYTE_OFFSET = 3


def write_byte_vocab(path: Path) -> Path:
    """A GGUF holding only a vocabulary (llama.cpp's SPM type): <unk>, <s>, </s>, the bytes."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_block_count(1)
    writer.add_feed_forward_length(8)
    writer.add_head_count(1)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("llama")
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    # normal, control, control, then byte tokens
    writer.add_token_types([2, 3, 3] + [6] * 256)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(EOS)
    writer.add_unk_token_id(0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class LlamaJudge:
    """llama.cpp's verdict on a text under a (whole) GBNF grammar."""

    def __init__(self, vocab_path: Path) -> None:
        import llama_cpp

        self.lib: Any = llama_cpp
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(str(vocab_path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp cannot load {vocab_path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.data = (llama_cpp.llama_token_data * 1)()
        self.candidates = llama_cpp.llama_token_data_array(self.data, 1, -1, False)

    def allowed(self, sampler: Any, token: int) -> bool:
        """Whether the grammar lets ``token`` through now."""
        self.data[0].id, self.data[0].logit, self.data[0].p = token, 0.0, 0.0
        self.candidates.size, self.candidates.selected = 1, -1
        self.lib.llama_sampler_apply(sampler, ctypes.byref(self.candidates))
        return bool(self.data[0].logit != float("-inf"))

    def verdict(self, gbnf: str, text: str) -> str:
        """``accept``, ``reject`` or ``incomplete`` (``error``: llama.cpp refuses the grammar)."""
        lib = self.lib
        sampler = lib.llama_sampler_init_grammar(self.vocab, gbnf.encode(), b"root")
        if not sampler:
            return "error"
        try:
            for byte in text.encode():
                if not self.allowed(sampler, BYTE_OFFSET + byte):
                    return "reject"
                lib.llama_sampler_accept(sampler, BYTE_OFFSET + byte)
            return "accept" if self.allowed(sampler, EOS) else "incomplete"
        finally:
            lib.llama_sampler_free(sampler)

    def close(self) -> None:
        self.lib.llama_model_free(self.model)
