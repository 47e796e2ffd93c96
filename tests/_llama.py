"""A real engine for the grammar tests: llama.cpp (through llama-cpp-python) over a tiny model.

``write_model`` writes a random-weight llama GGUF whose vocabulary is the 256 bytes (SentencePiece
byte tokens) plus ``<unk>``, ``<s>`` and the end-of-generation ``</s>``: any text is spelled one
byte a token, so llama.cpp's grammar engine judges exactly the text, as its own
``llama_grammar_accept_str`` does. ``Engine`` loads it and gives

* ``verdict(gbnf, text, prefix)``: llama.cpp's grammar verdict on ``text`` (``accept``,
  ``reject`` or ``incomplete``), the grammar first fed ``prefix``;
* ``sample(grammar, prompt, generation_prompt, stops, seed)``: a reply sampled as llama-server
  samples it under a request's grammar: a whole grammar's sampler is first fed the generation
  prompt's tokens, a lazy one waits for its triggers (regular expressions built as llama.cpp
  builds them) and reads the text from the trigger on, a thought kept from it by the reasoning
  budget llama-server adds beside it (given the thought's tags); generation ends at end-of-generation or
  at a stop string, which is cut off.

The model is random, so a reply would wander for ever: each step adds to the model's logits a
pull towards ending (``-weight * distance``, where the distance of a token is the fewest
characters the reply still has with it, the token counted, from ``_gbnf.Steering``, so that
ending wins where the grammar could also go on with free text; the weight grows with the
reply's length; before a lazy grammar's trigger, the distance to the nearest trigger word and
through the grammar after it; at a choice of a few tokens the model is left alone 30% of the
time, so optional members and parallel calls get written too, until the reply reaches half its
token budget). Tokens that would make the text ill-formed UTF-8 are
masked (llama.cpp's grammar decodes bytes leniently; a tokenizer's text is UTF-8). The pull is
only a bias: llama.cpp's grammar sampler alone decides which tokens may come, so a reply is
valid because of the grammar, never because of the pull.
"""

from __future__ import annotations

import ctypes
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chatcodec.grammar.constraint import Grammar

from ._gbnf import LazySteering, Steering, ThoughtSteering
from ._grammar_replies import ReasoningBudget, Thinking

__all__ = ["Engine", "write_model", "write_chat_model", "VOCAB_SIZE", "EOS"]

UNK, BOS, EOS = 0, 1, 2
BYTE0 = 3  # the token of byte b is BYTE0 + b
VOCAB_SIZE = BYTE0 + 256
N_EMBD, N_HEAD, N_FF, N_LAYER, N_CTX = 32, 2, 64, 2, 8192
TEMPERATURE = 1.0
PULL = 0.2  # the pull towards ending, per generated token and per character of distance
# where the grammar leaves a few tokens (a choice: another member or the end of an object),
# the model alone picks this share of the time, so optional parts get written too
CHOICE, UNSTEERED = 8, 0.3
MAX_TOKENS = 400
FAVOUR_CONSTANT = 200.0  # dimension 0 of every embedding, when tokens are favoured


def _llama_writer(path: Path, vocab_size: int) -> Any:
    """A GGUF writer at ``path`` with the tiny llama architecture's header."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab_size)
    return writer


def write_model(path: Path, seed: int = 0) -> Path:
    """A tiny llama GGUF at ``path`` with seeded random weights and the byte vocabulary."""
    import gguf

    rng = np.random.default_rng(seed)
    writer = _llama_writer(path, VOCAB_SIZE)
    writer.add_tokenizer_model("llama")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * VOCAB_SIZE)
    writer.add_token_types(kinds + [gguf.TokenType.BYTE] * 256)
    writer.add_unk_token_id(UNK)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_add_bos_token(False)

    _write_weights(writer, rng, VOCAB_SIZE)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _write_weights(
    writer: Any,
    rng: np.random.Generator,
    vocab_size: int,
    favoured: Mapping[int, float] | None = None,
) -> None:
    """The llama hyperparameters' tensors, seeded random. ``favoured`` (token -> logit): every
    embedding carries a large constant in dimension 0, which the final norm leaves near
    ``sqrt(N_EMBD)`` at every position, and the output row of each favoured token reads it:
    a constant bias of about that many logits (the other rows ignore dimension 0)."""

    def weight(name: str, *shape: int) -> None:
        # numpy's (rows, columns) is ggml's (columns, rows)
        writer.add_tensor(name, rng.normal(0.0, 0.5, shape).astype(np.float32))

    embeddings = rng.normal(0.0, 1.0, (vocab_size, N_EMBD)).astype(np.float32)
    output = rng.normal(0.0, 0.5, (vocab_size, N_EMBD)).astype(np.float32)
    if favoured:
        embeddings[:, 0] = FAVOUR_CONSTANT
        output[:, 0] = 0.0
        for token, logit in favoured.items():
            output[token, 0] = logit / math.sqrt(N_EMBD)
    writer.add_tensor("token_embd.weight", embeddings)
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for part in ("q", "k", "v", "output"):
            weight(f"blk.{i}.attn_{part}.weight", N_EMBD, N_EMBD)
        weight(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        weight(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        weight(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)


def _byte_symbols() -> list[str]:
    """The 256 characters byte-level BPE (GPT-2's) writes the bytes 0..255 as."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += range(ord("®"), ord("ÿ") + 1)
    symbols, extra = {b: chr(b) for b in kept}, 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def write_chat_model(
    path: Path,
    template: str,
    special_tokens: Sequence[str],
    bos: str,
    eos: str,
    seed: int = 0,
    favoured: Mapping[str, float] | None = None,
    user_defined: Sequence[str] = (),
) -> Path:
    """A tiny llama GGUF whose tokenizer is byte-level BPE (the 256 byte symbols, one merge:
    two spaces) plus ``special_tokens`` as control tokens (``bos`` and ``eos`` among them;
    those of them in ``user_defined`` as user-defined tokens, which a detokenizer that leaves
    control tokens out still writes, as conversions mark a tokenizer's non-special ones),
    with ``template`` as its chat template: what ``chatcodec serve MODEL.gguf`` reads.
    ``favoured`` (a special token or a one-byte text -> logit) biases the random model towards those tokens (see
    ``_write_weights``): a grammar that lets free text run until a call marker then ends
    soon, yet which text is valid is still the grammar's decision alone."""
    import gguf

    specials = list(dict.fromkeys([bos, eos, *special_tokens]))
    tokens = [*_byte_symbols(), "\u0120\u0120", *specials]
    vocab_size = len(tokens)
    writer = _llama_writer(path, vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    kinds = [
        gguf.TokenType.USER_DEFINED if t in user_defined else gguf.TokenType.CONTROL
        for t in specials
    ]
    writer.add_token_types([gguf.TokenType.NORMAL] * 257 + kinds)
    writer.add_token_merges(["\u0120 \u0120"])  # llama.cpp's BPE wants at least one
    writer.add_bos_token_id(tokens.index(bos))
    writer.add_eos_token_id(tokens.index(eos))
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)
    bias = {_token_id(tokens, text): logit for text, logit in (favoured or {}).items()}
    _write_weights(writer, np.random.default_rng(seed), vocab_size, bias)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _token_id(tokens: list[str], text: str) -> int:
    """The id of a special token, or of the byte token of a one-byte text."""
    if text in tokens[257:]:
        return tokens.index(text, 257)
    data = text.encode("utf-8")
    if len(data) != 1:
        raise ValueError(f"{text!r} is neither a special token nor one byte")
    return data[0]


def tokens_of(text: str | bytes) -> list[int]:
    """The byte tokens that spell ``text`` (UTF-8)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return [BYTE0 + b for b in data]


def trigger_patterns(grammar: Grammar) -> list[str]:
    """The regular expressions a lazy grammar's sampler waits for, as llama.cpp's
    ``common_sampler_init`` builds them: words escaped, patterns as they are, full patterns
    anchored at both ends."""
    patterns = []
    for trigger in grammar.triggers:
        value = trigger.value
        if trigger.type == "word":
            patterns.append(re.sub(r"[.^$|()*+?\[\]{}\\]", r"\\\g<0>", value))
        elif trigger.type == "pattern":
            patterns.append(value)
        elif trigger.type == "pattern_full":
            head = "" if value.startswith("^") else "^"
            patterns.append(head + value + ("" if value.endswith("$") else "$"))
        else:  # the byte vocabulary has none of the template's tokens to trigger on
            raise ValueError(f"a {trigger.type} trigger needs the checkpoint's own vocabulary")
    return patterns


class Engine:
    """The tiny model loaded into llama.cpp: its vocabulary's grammar sampler and its logits."""

    def __init__(self, path: Path) -> None:
        import llama_cpp

        self.lib = llama_cpp
        # llama.cpp's log, silenced (the callback object must outlive the engine)
        self.quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(self.quiet, ctypes.c_void_p())
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        context_params = llama_cpp.llama_context_default_params()
        context_params.n_ctx = N_CTX
        context_params.n_batch = N_CTX
        context_params.n_ubatch = 512
        context_params.n_threads = 1
        context_params.n_threads_batch = 1
        self.context = llama_cpp.llama_init_from_model(self.model, context_params)
        self.data = (llama_cpp.llama_token_data * VOCAB_SIZE)()
        self.table = np.ctypeslib.as_array(self.data)  # the same memory, as numpy fields
        self.candidates = llama_cpp.llama_token_data_array(
            data=self.data, size=VOCAB_SIZE, selected=-1, sorted=False
        )
        self.prompt: list[int] = []  # the prompt the context holds, and its last logits
        self.prompt_logits = np.zeros(VOCAB_SIZE)

    def close(self) -> None:
        self.lib.llama_free(self.context)
        self.lib.llama_model_free(self.model)

    # ------------------------------------------------------------------ grammar sampler

    def grammar_sampler(self, gbnf: str, patterns: Sequence[str] = ()) -> ctypes.c_void_p:
        """llama.cpp's grammar sampler over this vocabulary; lazy, waiting for one of
        ``patterns``, when there are any (``llama_sampler_init_grammar_lazy_patterns``)."""
        lib = self.lib
        if patterns:
            array = (ctypes.c_char_p * len(patterns))(*(p.encode("utf-8") for p in patterns))
            sampler = lib.llama_sampler_init_grammar_lazy_patterns(
                self.vocab, gbnf.encode(), b"root", array, len(patterns), None, 0
            )
        else:
            sampler = lib.llama_sampler_init_grammar(self.vocab, gbnf.encode(), b"root")
        if not sampler:
            raise ValueError("llama.cpp's grammar parser rejects the grammar")
        return sampler

    def allowed(self, sampler: ctypes.c_void_p, logits: np.ndarray) -> np.ndarray:
        """``logits`` after the grammar sampler: -inf where the grammar refuses the token."""
        self.table["id"] = np.arange(VOCAB_SIZE)
        self.table["logit"] = logits
        self.table["p"] = 0.0
        self.candidates.size = VOCAB_SIZE
        self.candidates.selected = -1
        self.candidates.sorted = False
        self.lib.llama_sampler_apply(sampler, ctypes.byref(self.candidates))
        # the sampler may reorder the array: read each logit back by its token
        out = np.full(VOCAB_SIZE, -np.inf)
        size = self.candidates.size
        out[self.table["id"][:size]] = self.table["logit"][:size]
        return out

    def verdict(self, gbnf: str, text: str, prefix: str = "") -> str:
        """llama.cpp's grammar engine on ``text``: ``accept`` (it may end there), ``incomplete``
        (it may go on but not end) or ``reject`` (a token refused), after ``prefix``."""
        sampler = self.grammar_sampler(gbnf)
        try:
            for token in tokens_of(prefix + text):
                # the sampler aborts on a token its grammar refuses: ask first
                if not self._allows(sampler, token):
                    return "reject"
                self.lib.llama_sampler_accept(sampler, token)
            return "accept" if self._allows(sampler, EOS) else "incomplete"
        finally:
            self.lib.llama_sampler_free(sampler)

    def _allows(self, sampler: ctypes.c_void_p, token: int) -> bool:
        self.data[0].id = token
        self.data[0].logit = 0.0
        self.candidates.size = 1
        self.candidates.selected = -1
        self.candidates.sorted = False
        self.lib.llama_sampler_apply(sampler, ctypes.byref(self.candidates))
        return self.data[0].logit != -math.inf

    # ------------------------------------------------------------------ the model

    def _decode(self, tokens: Sequence[int]) -> np.ndarray:
        """Feed ``tokens`` after what the context holds; the logits of the last one."""
        lib = self.lib
        array = (lib.llama_token * len(tokens))(*tokens)
        if lib.llama_decode(self.context, lib.llama_batch_get_one(array, len(tokens))) != 0:
            raise RuntimeError("llama_decode failed")
        pointer = lib.llama_get_logits_ith(self.context, -1)
        return np.ctypeslib.as_array(pointer, shape=(VOCAB_SIZE,)).astype(np.float64)

    def _start(self, prompt: list[int]) -> np.ndarray:
        """The context holding just ``prompt`` (kept from the last reply when it is the same);
        the logits after it."""
        memory = self.lib.llama_get_memory(self.context)
        if prompt == self.prompt:
            self.lib.llama_memory_seq_rm(memory, 0, len(prompt), -1)
        else:
            self.lib.llama_memory_clear(memory, True)
            self.prompt_logits = self._decode(prompt)
            self.prompt = prompt
        return self.prompt_logits

    def sample(
        self,
        grammar: Grammar,
        prompt: str,
        generation_prompt: str,
        stops: Sequence[str] = (),
        seed: int = 0,
        max_tokens: int = MAX_TOKENS,
        thinking: Thinking | None = None,
    ) -> str:
        """One reply to ``prompt`` sampled under ``grammar`` as llama-server samples it; with
        ``thinking`` (the thought's start and end tags llama.cpp records), a lazy grammar gets a
        reasoning budget beside it: a thought never reaches the grammar, its end tag does."""
        lib = self.lib
        rng = np.random.default_rng(seed)
        pull = PULL * rng.uniform(0.1, 1.0)  # some replies end soon, others wander further
        steering: Steering | LazySteering
        budget: ReasoningBudget | None = None
        thought: ThoughtSteering | None = None
        if grammar.lazy:
            patterns = trigger_patterns(grammar)
            words = [t.value for t in grammar.triggers if t.type == "word"]
            sampler = self.grammar_sampler(grammar.gbnf, patterns)
            steering = LazySteering(grammar.gbnf, words, patterns)
            if thinking is not None:
                budget = ReasoningBudget(thinking, generation_prompt)
                thought = ThoughtSteering(thinking[1], steering.nearest())
        else:
            sampler = self.grammar_sampler(grammar.gbnf)
            steering = Steering(grammar.gbnf)
        try:
            if not grammar.lazy:  # the server feeds a whole grammar the generation prompt
                for token in tokens_of(generation_prompt):
                    lib.llama_sampler_accept(sampler, token)
                steering.feed(generation_prompt.encode("utf-8"))
            logits = self._start(tokens_of(prompt))
            reply = bytearray()
            for step in range(max_tokens):
                steer = thought if budget is not None and budget.counting else steering
                assert steer is not None
                scores = self.allowed(sampler, logits / TEMPERATURE)
                scores[~steer.well_formed()] = -np.inf  # what a tokenizer could decode
                choice = np.isfinite(scores).sum() <= CHOICE
                # past half the budget a reply is always steered (parallel calls end)
                if not choice or step >= max_tokens // 2 or rng.random() >= UNSTEERED:
                    scores = scores - pull * step * steer.distances()
                token = _draw(scores, rng)
                if token == EOS:
                    break
                reply.append(token - BYTE0)
                self._accept(sampler, steering, thought, budget, token - BYTE0)
                text = reply.decode("utf-8", errors="ignore")
                stop = next((s for s in stops if s in text), None)
                if stop is not None:
                    return text[: text.index(stop)]
                logits = self._decode([token])
            else:
                raise AssertionError(f"no end after {max_tokens} tokens: {bytes(reply)!r}")
            return reply.decode("utf-8")
        finally:
            lib.llama_sampler_free(sampler)

    def _accept(
        self,
        sampler: ctypes.c_void_p,
        steering: Steering | LazySteering,
        thought: ThoughtSteering | None,
        budget: ReasoningBudget | None,
        byte: int,
    ) -> None:
        """A sampled byte, given to the grammar (and its steering) as far as it reaches it."""
        if budget is None or thought is None:
            seen = bytes([byte])
        else:
            inside = budget.counting
            seen = budget.feed(byte)
            if inside:
                thought.feed(bytes([byte]))
            elif budget.counting:  # a thought opens: steer towards its end from scratch
                thought.reset()
        for b in seen:
            self.lib.llama_sampler_accept(sampler, BYTE0 + b)
        steering.feed(seen)


def _draw(scores: np.ndarray, rng: np.random.Generator) -> int:
    finite = np.isfinite(scores)
    if not finite.any():
        raise AssertionError("the grammar allows no token at all")
    weights = np.where(finite, np.exp(scores - scores[finite].max()), 0.0)
    return int(rng.choice(len(scores), p=weights / weights.sum()))
