"""Codec.encode: the token ids transformers 5.23.0's ``apply_chat_template(..., tokenize=True)``
gives with the checkpoint's tokenizer, its assistant masks where the template has
``{% generation %}``, and chatcodec's masks (with their switches) everywhere else.

The tokenizer is real: a byte-level BPE trained once per session with ``tokenizers``, each
template's markers added as added tokens, saved as a checkpoint folder (tests/_tokenizer.py)
that both chatcodec and ``AutoTokenizer.from_pretrained`` load.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import pickle
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from chatcodec import (
    Codec,
    Encoding,
    MissingExtraError,
    RequestError,
    Span,
    TokenizerError,
    load,
)
from chatcodec.encoding import assistant_token_mask
from chatcodec.tokenizer import JsonTokenizer, Tokenized, load_tokenizer

from ._hypothesis import SEEDED
from ._reply_oracle import RENDER_CASES
from ._tokenizer import write_checkpoint
from .conftest import TEMPLATES, read_jsonl, template_source

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n"
    "</think>\n\n{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TAGGED = (
    "{% for m in messages %}{% if m.role == 'assistant' %}<|assistant|>{% generation %}"
    "{{ m.content }}<|end|>{% endgeneration %}\n{% else %}<|{{ m.role }}|>{{ m.content }}"
    "<|end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
LLAMA = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
WRITTEN = {"chatml": CHATML, "tagged": TAGGED, "llama": LLAMA}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "Two and two."},
    {"role": "user", "content": "Café? 🙂"},
    {"role": "assistant", "content": "Crème, naïve — 你好."},
]
CONVERSATIONS = [
    CONVERSATION,
    CONVERSATION[:2],
    [
        {"role": "user", "content": "<|im_end|> is text here"},
        {"role": "assistant", "content": " x "},
    ],
]
SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}


# ------------------------------------------------------------------ the oracle


class _Clock:
    """transformers' ``strftime_now`` reads ``datetime.now()``: pinned to a case's instant."""

    instant = 0.0

    @classmethod
    def now(cls, tz: Any = None) -> dt.datetime:
        return dt.datetime.fromtimestamp(cls.instant, dt.timezone.utc).replace(tzinfo=None)


@pytest.fixture(scope="module")
def pinned_clock() -> Iterator[type[_Clock]]:
    from transformers.utils import chat_template_utils

    saved = chat_template_utils.datetime
    chat_template_utils.datetime = _Clock  # type: ignore[assignment]
    yield _Clock
    chat_template_utils.datetime = saved


@functools.cache
def _hf_tokenizer(folder: str) -> Any:
    transformers.logging.set_verbosity_error()
    return transformers.AutoTokenizer.from_pretrained(folder)


def _reference(folder: Path, case: dict[str, Any]) -> dict[str, list[int]] | None:
    """transformers' ids and masks for a case, or None when it raises."""
    _Clock.instant = case.get("now_unix") or 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = _hf_tokenizer(str(folder)).apply_chat_template(
                case["messages"],
                tools=case.get("tools"),
                documents=case.get("documents"),
                add_generation_prompt=case.get("add_generation_prompt", False),
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
                **case.get("kwargs", {}),
            )
        except Exception:
            return None
    return {key: list(out[key]) for key in ("input_ids", "attention_mask", "assistant_masks")}


def _encode(codec: Codec, case: dict[str, Any], **options: Any) -> Encoding | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return codec.encode(
                case["messages"],
                case.get("tools"),
                case.get("documents"),
                case.get("add_generation_prompt", False),
                now=case.get("now_unix"),
                **case.get("kwargs", {}),
                **options,
            )
        except Exception:
            return None


def _folder(tmp_path_factory: pytest.TempPathFactory, name: str, source: str, tokens: dict) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("checkpoint") / name, source, tokens)


# ------------------------------------------------------------------ parity over the corpus


@functools.cache
def _corpus() -> dict[str, list[dict[str, Any]]]:
    """The render corpus's conversations transformers tokenizes (continued final messages
    are not: return_assistant_tokens_mask refuses them), by template."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for case in read_jsonl(RENDER_CASES):
        if "error" not in case and not case["continue_final_message"]:
            grouped.setdefault(case["template"], []).append(case)
    return grouped


def _corpus_templates() -> list[Any]:
    if not RENDER_CASES.exists():
        reason = "../shared is not present (the corpus lives beside the checkout)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-shared")]
    return sorted(_corpus())


def _family_tokens(cases: list[dict[str, Any]]) -> dict[str, str]:
    """The bos/eos the corpus passes with this template: the checkpoint's own."""
    kwargs = next((c["kwargs"] for c in cases if c["kwargs"].get("eos_token")), {})
    return {k: kwargs[k] for k in ("bos_token", "eos_token") if kwargs.get(k)}


@pytest.mark.parametrize(("kind", "every"), [("byte_level", 1), ("metaspace", 4)])
@pytest.mark.parametrize("name", _corpus_templates())
def test_encode_matches_transformers_on_the_render_corpus(
    name: str,
    kind: str,
    every: int,
    tmp_path_factory: pytest.TempPathFactory,
    pinned_clock: type[_Clock],
) -> None:
    """Every conversation over a byte-level BPE; every fourth over a SentencePiece-style one
    (dev/encode_parity.py --kind metaspace runs them all)."""
    tokens = _family_tokens(_corpus()[name])
    cases = _corpus()[name][::every]
    folder = tmp_path_factory.mktemp("checkpoint") / name
    codec = load(write_checkpoint(folder, template_source(name), tokens, kind=kind))
    tagged = codec.template.has_generation_tag
    differences = []
    for case in cases:
        expected, got = _reference(folder, case), _encode(codec, case)
        if expected is None or got is None:
            if (expected is None) != (got is None):
                differences.append((case["id"], "only one of them raised"))
            continue
        if got.input_ids != expected["input_ids"]:
            differences.append((case["id"], "input_ids"))
        if got.attention_mask != expected["attention_mask"]:
            differences.append((case["id"], "attention_mask"))
        if tagged and got.assistant_masks != expected["assistant_masks"]:
            differences.append((case["id"], "assistant_masks"))
    assert differences == []


@pytest.mark.parametrize("name", _corpus_templates())
def test_the_mask_switches_only_narrow_the_mask(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Over the corpus (every fourth conversation): each switch unmarks tokens, never marks
    one; without the end marker no marked run ends in a special token; without the thought
    no marked token holds the first closing marker of a span's thought."""
    cases = _corpus()[name][::4]
    folder = _folder(tmp_path_factory, name, template_source(name), _family_tokens(cases))
    codec = load(folder)
    thought = codec.thought_markers()
    for case in cases:
        full = _encode(codec, case)
        if full is None:
            continue
        no_end = _encode(codec, case, mask_end_marker=False)
        no_thought = _encode(codec, case, mask_reasoning=False)
        assert no_end is not None and no_thought is not None
        for narrowed in (no_end, no_thought):
            assert narrowed.input_ids == full.input_ids
            assert all(
                a <= b for a, b in zip(narrowed.assistant_masks, full.assistant_masks, strict=True)
            )
        flags = no_end.assistant_masks
        for index, flag in enumerate(flags):
            if flag and (index + 1 == len(flags) or not flags[index + 1]):
                assert not codec.tokenizer.is_special(no_end.input_ids[index]), case["id"]
        if thought is not None:
            _assert_first_thought_unmarked(no_thought, thought, case["id"])


def _assert_first_thought_unmarked(encoding: Encoding, thought: Any, case_id: str) -> None:
    for span in encoding.spans:
        starts = [encoding.text.find(c, span.start - 16, span.end) for c in thought.closers]
        found = [(at, c) for at, c in zip(starts, thought.closers, strict=True) if at >= 0]
        if not found:
            continue
        at, closer = min(found)
        for (a, b), flag in zip(encoding.offsets, encoding.assistant_masks, strict=True):
            assert not (flag and a < at + len(closer) and b > at), case_id


@pytest.mark.parametrize("kind", ["byte_level", "metaspace"])
@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_encode_matches_transformers_on_templates_written_here(
    name: str, kind: str, tmp_path: Path, pinned_clock: type[_Clock]
) -> None:
    """Also over a SentencePiece-style tokenizer (a ``▁`` put before the text, characters
    outside its alphabet unknown), whose offsets and ``char_to_token`` differ."""
    folder = write_checkpoint(tmp_path / name, WRITTEN[name], SPECIAL, kind=kind)
    codec = load(folder)
    for messages in CONVERSATIONS:
        for prompt in (False, True):
            case = {"messages": messages, "add_generation_prompt": prompt}
            expected, got = _reference(folder, case), _encode(codec, case)
            assert expected is not None and got is not None
            assert got.input_ids == expected["input_ids"]
            assert got.attention_mask == expected["attention_mask"]
            if name == "tagged":
                assert got.assistant_masks == expected["assistant_masks"]
                assert any(got.assistant_masks) == any(m["role"] == "assistant" for m in messages)


# text a conversation may hold: words, whitespace runs, accents and combining marks, CJK,
# emoji, and the markers the templates and tokenizers treat specially, written as plain text
_PIECES = st.sampled_from(
    ["Hello", " world", "  ", "\n", "\n\n", "\t", " ", "Café", "e\u0301", "你好", "🙂", "🚀x"]
    + ["<|im_end|>", "<|im_start|>", "<|end|>", "<|assistant|>", "<think>", "</think>", "▁"]
    + ['{"a": 1}', "2 + 2", "x" * 40, "Привет", "\u00a0", "\r\n"]
)
_TEXT = st.lists(_PIECES, max_size=8).map("".join)
_TURNS = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system"]), "content": _TEXT},
        optional={"reasoning_content": _TEXT},
    ),
    min_size=1,
    max_size=5,
)


@pytest.fixture(scope="module")
def written_kinds(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    return {
        (name, kind): write_checkpoint(
            tmp_path_factory.mktemp("kinds") / f"{name}-{kind}", source, SPECIAL, kind=kind
        )
        for name, source in WRITTEN.items()
        for kind in ("byte_level", "metaspace")
    }


@pytest.mark.parametrize("kind", ["byte_level", "metaspace"])
@pytest.mark.parametrize("name", sorted(WRITTEN))
@settings(SEEDED, max_examples=40)
@given(messages=_TURNS, prompt=st.booleans())
def test_encode_matches_transformers_on_random_texts(
    name: str,
    kind: str,
    messages: list[dict[str, Any]],
    prompt: bool,
    written_kinds: dict[tuple[str, str], Path],
    pinned_clock: type[_Clock],
) -> None:
    """Random texts (markers written as plain text, whitespace runs, combining marks,
    characters a SentencePiece-style vocabulary does not know) encode to transformers' ids,
    and to its masks on the tag template."""
    folder = written_kinds[name, kind]
    case = {"messages": messages, "add_generation_prompt": prompt}
    expected, got = _reference(folder, case), _encode(load(folder), case)
    assert (expected is None) == (got is None)
    if expected is None or got is None:
        event("both refuse it")
        return
    event("some tokens masked" if any(got.assistant_masks) else "no token masked")
    assert got.input_ids == expected["input_ids"]
    assert got.attention_mask == expected["attention_mask"]
    starts = [a for a, _ in got.offsets]
    assert all(0 <= a <= b <= len(got.text) for a, b in got.offsets) and starts == sorted(starts)
    if name == "tagged":
        assert got.assistant_masks == expected["assistant_masks"]


# ------------------------------------------------------------------ what the mask covers


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Codec]:
    return {
        name: load(_folder(tmp_path_factory, name, source, SPECIAL))
        for name, source in WRITTEN.items()
    }


def _masked_texts(encoding: Encoding) -> list[str]:
    """The text of each run of masked tokens (tokens holding parts of one character share
    its range: it is read once)."""
    runs: list[str] = []
    previous, reached = 0, 0
    for flag, (start, end) in zip(encoding.assistant_masks, encoding.offsets, strict=True):
        if flag and not previous:
            runs.append("")
        if flag:
            runs[-1] += encoding.text[max(start, reached) : end]
        previous, reached = flag, max(reached, end)
    return runs


def test_derived_masks_cover_the_assistant_turns(written: dict[str, Codec]) -> None:
    encoding = written["chatml"].encode(CONVERSATION)
    assert encoding.spans == written["chatml"].render_with_spans(CONVERSATION).spans
    assert _masked_texts(encoding) == [
        "<think>\nTwo and two.\n</think>\n\n4<|im_end|>",
        "Crème, naïve — 你好.<|im_end|>",
    ]


def test_the_end_marker_can_be_left_out(written: dict[str, Codec]) -> None:
    for name, turns in (
        ("chatml", ["4", "Crème, naïve — 你好."]),
        ("llama", ["4", "Crème, naïve — 你好."]),
    ):
        encoding = written[name].encode(CONVERSATION, mask_end_marker=False, mask_reasoning=False)
        assert _masked_texts(encoding) == turns, name
    tagged = written["tagged"].encode(CONVERSATION, mask_end_marker=False)
    assert _masked_texts(tagged) == ["4", "Crème, naïve — 你好."]


def test_the_thought_can_be_left_out(written: dict[str, Codec]) -> None:
    encoding = written["chatml"].encode(CONVERSATION, mask_reasoning=False)
    assert _masked_texts(encoding) == ["4<|im_end|>", "Crème, naïve — 你好.<|im_end|>"]
    # llama.cpp reads no thought in this template's replies: nothing to leave out
    llama = written["llama"]
    assert llama.thought_markers() is None
    assert llama.encode(CONVERSATION, mask_reasoning=False) == llama.encode(CONVERSATION)


def test_a_thought_the_generation_prompt_opened(tmp_path_factory: pytest.TempPathFactory) -> None:
    name = "Qwen3.5-4B.jinja"
    codec = load(
        _folder(tmp_path_factory, name, template_source(name), {"eos_token": "<|im_end|>"})
    )
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "Greet back."},
    ]
    assert _masked_texts(codec.encode(messages)) == ["Greet back.\n</think>\n\nHello<|im_end|>"]
    assert _masked_texts(codec.encode(messages, mask_reasoning=False)) == ["Hello<|im_end|>"]
    both = codec.encode(messages, mask_reasoning=False, mask_end_marker=False)
    assert _masked_texts(both) == ["Hello"]


def test_offsets_spell_the_text(written: dict[str, Codec]) -> None:
    for codec in written.values():
        encoding = codec.encode(CONVERSATION, add_generation_prompt=True)
        assert len(encoding.offsets) == len(encoding.input_ids) == len(encoding.assistant_masks)
        pieces, end = [], 0
        for start, stop in encoding.offsets:
            assert end <= stop, "offsets go forward"
            pieces.append(encoding.text[max(start, end) : stop])
            end = max(end, stop)
        assert "".join(pieces) == encoding.text


def test_to_dict_names_what_trainers_read(written: dict[str, Codec]) -> None:
    encoding = written["tagged"].encode(CONVERSATION)
    row = encoding.to_dict()
    assert list(row) == ["input_ids", "attention_mask", "assistant_masks"]
    assert row["attention_mask"] == [1] * len(encoding.input_ids)
    assert encoding.to_dict(text=True)["text"] == written["tagged"].render(CONVERSATION)
    json.dumps(row)


# ------------------------------------------------------------------ transformers' rule, edges


def _tokens(offsets: list[tuple[int, int]]) -> Tokenized:
    def char_to_token(char: int) -> int | None:
        return next((i for i, (a, b) in enumerate(offsets) if a <= char < b), None)

    return Tokenized(list(range(len(offsets))), offsets, char_to_token)


def test_the_mask_rule_keeps_transformers_edges() -> None:
    tokens = _tokens([(0, 2), (2, 4), (5, 7), (7, 9)])  # character 4 is in no token
    # a span marks from the token of its first character to the token of its last
    assert assistant_token_mask(tokens, [Span(2, 6)]) == [0, 1, 1, 0]
    # a span whose first character no token holds stops the marking, later spans included
    assert assistant_token_mask(tokens, [Span(4, 6), Span(7, 9)]) == [0, 0, 0, 0]
    # a last character no token holds, or one in token 0, marks to the end of the text
    assert assistant_token_mask(tokens, [Span(2, 5)]) == [0, 1, 1, 1]
    assert assistant_token_mask(tokens, [Span(0, 1)]) == [1, 1, 1, 1]
    # an empty span inside a token marks it; at character 0 (transformers raises) nothing
    assert assistant_token_mask(tokens, [Span(3, 3)]) == [0, 1, 0, 0]
    assert assistant_token_mask(tokens, [Span(0, 0)]) == [0, 0, 0, 0]


def test_transformers_fails_on_an_empty_span_at_the_start() -> None:
    from tokenizers import Tokenizer, models

    encoding = Tokenizer(models.BPE()).encode("")
    with pytest.raises(OverflowError):
        encoding.char_to_token(-1)  # what transformers asks for the span [0, 0)


# ------------------------------------------------------------------ tokenizer settings


@pytest.mark.parametrize(
    "config",
    [
        {"split_special_tokens": True},
        # the config's flags replace the file's: <|end|> strips the space around it
        {"added_tokens_decoder": "strip"},
        # a named special token the vocabulary lacks is added (special)
        {"pad_token": "<|pad|>", "extra_special_tokens": ["<|extra|>"]},
    ],
    ids=["split_special_tokens", "config_flags", "missing_special_tokens"],
)
def test_tokenizer_config_settings_as_transformers_applies_them(
    config: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = _folder(tmp_path_factory, "settings", TAGGED, SPECIAL)
    settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    if config.get("added_tokens_decoder") == "strip":
        for entry in settings["added_tokens_decoder"].values():
            if entry["content"] == "<|end|>":
                entry.update(lstrip=True, rstrip=True)
        config = {}
    settings.update(config)
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    codec = load(folder)
    text = "a <|end|> b <|pad|><|extra|> <|user|>x"
    case = {
        "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": " y "}]
    }
    expected = _reference(folder, case)
    assert expected is not None
    got = codec.encode(case["messages"])
    assert got.input_ids == expected["input_ids"]
    assert got.assistant_masks == expected["assistant_masks"]
    hf = _hf_tokenizer(str(folder))
    assert codec.tokenizer.tokenize(text).ids == hf(text, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------ where the tokenizer comes from


def test_a_codec_from_a_template_needs_a_tokenizer(written: dict[str, Codec]) -> None:
    codec = Codec(CHATML)
    with pytest.raises(TokenizerError, match="tokenizer="):
        codec.encode(CONVERSATION)
    given = codec.encode(CONVERSATION, tokenizer=written["chatml"].tokenizer)
    assert given == written["chatml"].encode(CONVERSATION)


def test_a_missing_tokenizers_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_checkpoint(tmp_path / "c", CHATML)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(MissingExtraError, match=r"chatcodec\[tokenize\]"):
        load(folder).encode(CONVERSATION)


def _with(text: str, reasoning: bool) -> dict[str, Any]:
    """A conversation holding ``text`` in the user's content, or in the assistant's thought."""
    if reasoning:
        thought = {"role": "assistant", "content": "ok", "reasoning_content": f"a{text}b"}
        return {"messages": [{"role": "user", "content": "hi"}, thought]}
    return {"messages": [{"role": "user", "content": f"a{text}b"}]}


@pytest.mark.parametrize(
    ("surrogate", "reasoning", "where"),
    [
        ("\ud800", False, "messages[0]['content']"),
        ("\udfff", True, "messages[1]['reasoning_content']"),
    ],
    ids=["content", "reasoning"],
)
def test_a_lone_surrogate_is_a_request_error_naming_where_it_is(
    surrogate: str, reasoning: bool, where: str, tmp_path: Path
) -> None:
    # the tokenizer used to raise its own TypeError ("TextInputSequence must be str")
    codec = load(write_checkpoint(tmp_path / "c", CHATML))
    with pytest.raises(RequestError) as caught:
        codec.encode(**_with(surrogate, reasoning))
    assert str(caught.value) == (
        f"{where} is not Unicode text: it holds {surrogate!r}, which no tokenizer reads"
    )
    # a real character in its place encodes
    assert "a\U0001f642b" in codec.encode(**_with("\U0001f642", reasoning)).text


def test_a_lone_surrogate_the_template_writes_is_a_request_error(tmp_path: Path) -> None:
    source = "{{ '\\ud800' }}" + CHATML
    codec = load(write_checkpoint(tmp_path / "c", source))
    with pytest.raises(RequestError, match=r"^the rendered text is not Unicode text: .* at 0,"):
        codec.encode(CONVERSATION)


def test_bad_tokenizer_paths(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="no such file"):
        load_tokenizer(tmp_path / "absent")
    with pytest.raises(TokenizerError, match="no tokenizer"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}", encoding="utf-8")
    with pytest.raises(TokenizerError, match="not a readable tokenizer.json"):
        load_tokenizer(tmp_path)


def test_the_tokenizer_pickles(written: dict[str, Codec]) -> None:
    tokenizer = written["chatml"].tokenizer
    assert isinstance(tokenizer, JsonTokenizer)
    again = pickle.loads(pickle.dumps(tokenizer))
    text = written["chatml"].render(CONVERSATION)
    assert again.tokenize(text).ids == tokenizer.tokenize(text).ids


def test_a_codec_pickles_with_its_tokenizer(written: dict[str, Codec]) -> None:
    """What a worker process receives: the templates recompile there, the tokenizer reloads."""
    codec = written["chatml"]
    codec.encode(CONVERSATION, mask_reasoning=False)  # compiled, loaded, markers cached
    again = pickle.loads(pickle.dumps(codec))
    for options in ({}, {"mask_reasoning": False}):
        assert again.encode(CONVERSATION, **options) == codec.encode(CONVERSATION, **options)


def test_a_gguf_is_tokenized_by_its_own_vocabulary(tmp_path: Path) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    from ._llama import write_chat_model

    path = write_chat_model(
        tmp_path / "chat.gguf", CHATML, ["<|im_start|>", "<|im_end|>"], "<s>", "<|im_end|>"
    )
    codec = load(path)
    encoding = codec.encode(CONVERSATION)
    model = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    expected = model.tokenize(encoding.text.encode("utf-8"), add_bos=False, special=True)
    assert encoding.input_ids == expected
    # the markers are single control tokens, and each token maps back to its text
    assert encoding.text[slice(*encoding.offsets[0])] == "<|im_start|>"
    assert codec.tokenizer.is_special(encoding.input_ids[0])
    assert _masked_texts(encoding) == [
        "<think>\nTwo and two.\n</think>\n\n4<|im_end|>",
        "Crème, naïve — 你好.<|im_end|>",
    ]
    assert (
        _masked_texts(codec.encode(CONVERSATION, mask_end_marker=False))[1]
        == "Crème, naïve — 你好."
    )


def test_the_encode_command_on_a_gguf_writes_its_row_and_nothing_else(tmp_path: Path) -> None:
    """llama.cpp logs as it loads a vocabulary (and warned of a vocabulary-only model's
    context): none of it reaches the command's output."""
    pytest.importorskip("llama_cpp")
    from ._llama import write_chat_model

    path = write_chat_model(
        tmp_path / "chat.gguf", CHATML, ["<|im_start|>", "<|im_end|>"], "<s>", "<|im_end|>"
    )
    result = _command(str(path), stdin=json.dumps(CONVERSATION))
    assert result.returncode == 0 and result.stderr == ""
    assert json.loads(result.stdout) == load(path).encode(CONVERSATION).to_dict()


def test_every_corpus_template_is_covered() -> None:
    if not TEMPLATES.exists():
        pytest.skip("../shared is not present")
    assert len(_corpus()) == 70


# ------------------------------------------------------------------ chatcodec encode


def _command(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatcodec", "encode", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_encode_command_prints_the_rows_a_trainer_reads(written: dict[str, Codec]) -> None:
    folder = str(written["chatml"].tokenizer_source)
    request = json.dumps({"messages": CONVERSATION})
    result = _command(folder, stdin=request)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == written["chatml"].encode(CONVERSATION).to_dict()
    options = ("--text", "--offsets", "--no-end-marker", "--no-reasoning", "-g")
    result = _command(folder, *options, stdin=request)
    assert result.returncode == 0, result.stderr
    encoding = written["chatml"].encode(
        CONVERSATION, add_generation_prompt=True, mask_end_marker=False, mask_reasoning=False
    )
    expected = {**encoding.to_dict(text=True), "offsets": [list(o) for o in encoding.offsets]}
    assert json.loads(result.stdout) == expected


def test_the_encode_command_without_a_tokenizer_says_so(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text(CHATML, encoding="utf-8")
    result = _command(str(path), stdin=json.dumps(CONVERSATION))
    assert result.returncode == 1
    assert result.stderr.startswith(f"chatcodec encode: {path}: TokenizerError: ")
    assert "tokenizer=" in result.stderr


def test_gguf_offsets_where_the_pieces_do_not_spell_the_text(tmp_path: Path) -> None:
    """A SentencePiece vocabulary of bytes: llama.cpp writes each space as ``▁`` (three byte
    tokens) and puts one first; those tokens hold no character, every other character is
    held by the tokens of its bytes."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from ._llama import write_model

    path = write_model(tmp_path / "spm.gguf")
    tokenizer = load_tokenizer(path)
    model = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    text = "Hello wörld 你好"
    tokens = tokenizer.tokenize(text)
    assert tokens.ids == model.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    held = dict.fromkeys(
        (a, b) for a, b in tokens.offsets if b > a
    )  # a character's tokens share it
    assert "".join(text[a:b] for a, b in held) == text.replace(" ", "")
    assert all(0 <= a <= b <= len(text) for a, b in tokens.offsets)
    assert tokens.char_to_token(text.index("ö")) is not None
    assert tokens.char_to_token(text.index(" ")) is None


def test_the_checkpoint_says_where_its_tokenizer_is(tmp_path: Path) -> None:
    from chatcodec import find_checkpoint

    folder = write_checkpoint(tmp_path / "c", CHATML)
    assert find_checkpoint(folder).tokenizer_path == folder
    (folder / "chat_template.jinja").write_text(CHATML, encoding="utf-8")
    assert find_checkpoint(folder / "chat_template.jinja").tokenizer_path == folder
    (folder / "tokenizer.json").unlink()
    assert find_checkpoint(folder).tokenizer_path is None
    with pytest.raises(TokenizerError, match="has none"):
        load(folder).encode(CONVERSATION)


@pytest.mark.parametrize(
    ("tokenizer_class", "same"),
    [("PreTrainedTokenizerFast", True), ("TokenizersBackend", True), ("Qwen2Tokenizer", False)],
)
def test_a_tokenizer_class_that_rebuilds_its_pipeline(
    tokenizer_class: str, same: bool, tmp_path: Path
) -> None:
    """docs/training.md, difference 3: transformers 5 builds Qwen2Tokenizer's own pipeline
    (its regex splits digits one by one) from the vocabulary; chatcodec reads tokenizer.json,
    whose pre-tokenizer here (GPT-2's regex) keeps digits together. A real Qwen checkpoint's
    tokenizer.json holds Qwen's regex, so the two agree there; the generic classes always do."""
    folder = write_checkpoint(tmp_path / "c", CHATML, config={"tokenizer_class": tokenizer_class})
    text = "22 42 2222 21.5"
    ours = load(folder).tokenizer.tokenize(text).ids
    theirs = _hf_tokenizer(str(folder))(text, add_special_tokens=False)["input_ids"]
    assert (ours == theirs) is same
