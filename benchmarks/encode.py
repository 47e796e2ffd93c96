"""chatcodec ``Codec.encode`` vs transformers ``apply_chat_template(tokenize=True,
return_assistant_tokens_mask=True)``: conversations per second, in one run.

Run from the repository root (the corpus lives in ``../shared`` beside the checkout)::

    pip install -e '.[dev]'            # tokenizers, transformers==5.23.0
    python benchmarks/encode.py          # every rendered conversation of the corpus
    python benchmarks/encode.py --quick  # every 5th, fewer rounds
    python benchmarks/encode.py --only Qwen --vocab ggml-vocab-qwen2.gguf  # a real vocabulary

Each template gets a checkpoint folder written for the run (tests/_tokenizer.py: a byte-level
BPE trained once, the template's markers as added tokens; or, with ``--vocab``, a real
byte-level vocabulary read from a llama.cpp GGUF), loaded by ``chatcodec.load`` and by
``AutoTokenizer.from_pretrained``. Both are timed on the same conversations (the render
corpus's, where neither raises), in alternating batches, each the fastest of its rounds.
Every timed conversation is checked first: the two ``input_ids`` must be equal (and the masks,
where the template has ``{% generation %}``), else the run fails. transformers' masks are
all zeros without the tag (it warns); chatcodec's are the derived ones, so on those templates
chatcodec does more work. Ratios are transformers' time / chatcodec's (above 1: chatcodec is
faster). The last two columns time the ``tokenizers`` package's own encode of the same text
alone: its share of chatcodec's time, and the ratio an encoder would reach that rendered and
masked for free (transformers' time / that encode): no encoder tokenizing every text afresh
can pass that ceiling.

chatcodec's tokenizer keeps the tokens of text between added tokens, so each timed call
empties that cache first (the call is repeated; it would find its own pieces). A second
table times one pass per template over its conversations, each once, the cache emptied at
the start of the pass: the repeats a pass over this corpus meets. A third (``--fresh N``)
times one pass over N conversations of new text (the standard library's docstrings, some
typeset, some ending in another language) through
three templates, and chatcodec's tokenizer against the tokenizers encode over their texts:
what a fine-tuning set meets, new text of words met before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ["TZ"] = "UTC"  # transformers' strftime_now reads the local clock
if hasattr(time, "tzset"):
    time.tzset()

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from render import big_qwen3_case, load_cases, paired_times, percentile, pinned  # noqa: E402
from tests._tokenizer import write_checkpoint  # noqa: E402


@dataclass
class Pass:
    template: str
    tagged: bool
    count: int
    ours: float  # seconds per pass
    theirs: float
    found: float  # the share of the pass's pieces (text between added tokens) found kept


@dataclass
class Timed:
    template: str
    tagged: bool
    ours: float  # seconds per conversation
    theirs: float
    tokenize: float  # the tokenizers package's encode of the rendered text alone


class Engines:
    """One template's two encoders over a checkpoint folder written for it."""

    def __init__(self, folder: Path) -> None:
        import transformers
        import transformers.utils.chat_template_utils as ctu

        from chatcodec import load

        transformers.logging.set_verbosity_error()
        self.ctu = ctu
        self.codec = load(folder)
        self.hf = transformers.AutoTokenizer.from_pretrained(str(folder))
        self.tagged = self.codec.template.has_generation_tag

    def ours(self, case: dict[str, Any], cold: bool = False) -> Callable[[], Any]:
        """chatcodec's encode; ``cold``: the tokenizer's piece cache emptied first, as for a
        conversation whose text was never seen (the timed call repeats the same one)."""
        codec, now, kwargs = self.codec, case["now_unix"], case["kwargs"]
        args = (case["messages"], case["tools"], case["documents"], case["add_generation_prompt"])
        if cold:
            clear = codec.tokenizer.cache.clear

            def run() -> Any:
                clear()
                return codec.encode(*args, now=now, **kwargs)

            return run
        return lambda: codec.encode(*args, now=now, **kwargs)

    def passes(self, cases: Sequence[dict[str, Any]]) -> tuple[Callable[[], Any], ...]:
        """One pass over the conversations in their order, each encoded once: chatcodec's
        (its cache emptied first, so it only keeps what this pass repeats) and
        transformers'."""
        ours = [self.ours(case) for case in cases]
        theirs = [self.theirs(case) for case in cases]
        cache = self.codec.tokenizer.cache

        def our_pass() -> None:
            cache.clear()
            for call in ours:
                call()

        def their_pass() -> None:
            for call in theirs:
                call()

        return our_pass, their_pass

    def theirs(self, case: dict[str, Any]) -> Callable[[], Any]:
        instant = pinned(case["now_unix"])

        class Clock:
            @staticmethod
            def now(tz: Any = None) -> Any:
                return instant

        def run() -> Any:
            self.ctu.datetime = Clock  # type: ignore[assignment]
            return self.hf.apply_chat_template(
                case["messages"],
                tools=case["tools"],
                documents=case["documents"],
                add_generation_prompt=case["add_generation_prompt"],
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
                **case["kwargs"],
            )

        return run

    def tokenize(self, case: dict[str, Any]) -> Callable[[], Any]:
        """The tokenizers package's own encode of the conversation's text, nothing else: the
        part of both encoders' time that neither can make cheaper."""
        text = self.ours(case)().text
        backend = self.codec.tokenizer.backend
        return lambda: backend.encode(text, add_special_tokens=False)

    def agree(self, case: dict[str, Any]) -> bool | None:
        """True when both give the same ids (and masks on a tag template); None when one raises."""
        try:
            ours, theirs = self.ours(case)(), self.theirs(case)()
        except Exception:  # noqa: BLE001 - a conversation the template refuses is not timed
            return None
        same = ours.input_ids == list(theirs["input_ids"])
        if self.tagged:
            same = same and ours.assistant_masks == list(theirs["assistant_masks"])
        return same


def fastest(call: Callable[[], Any], rounds: int, inner: int) -> float:
    """Seconds per call: the fastest of ``rounds`` batches of ``inner`` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            call()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def family_tokens(cases: Sequence[dict[str, Any]]) -> dict[str, str]:
    kwargs = next((c["kwargs"] for c in cases if c["kwargs"].get("eos_token")), {})
    return {k: kwargs[k] for k in ("bos_token", "eos_token") if kwargs.get(k)}


# The split patterns of the byte-level BPE vocabularies --vocab takes, by the GGUF's
# tokenizer.ggml.pre: those of Qwen2's and Llama 3's tokenizer.json (the conversion gives the
# ids of llama.cpp's own tests, models/ggml-vocab-{qwen2,llama-bpe}.gguf.inp/.out)
_SPLITS = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def vocab_tokenizer_json(path: Path) -> str:
    """A tokenizer.json text from a llama.cpp vocabulary (GGUF) of a byte-level BPE: its
    tokens, merges and control tokens (as special added tokens), Qwen2's or Llama 3's split
    pattern and normalizer."""
    import json

    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: not a GGUF file ({exc})") from None
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.ggml.")}
    model, pre = fields.get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.pre")
    if model != "gpt2" or pre not in _SPLITS:
        raise SystemExit(
            f"{path}: a byte-level BPE vocabulary with pre-tokenizer {' or '.join(_SPLITS)} "
            f"is needed (this one: model {model!r}, pre {pre!r})"
        )
    tokens, kinds = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    added = [
        {
            "id": index,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for index, (token, kind) in enumerate(zip(tokens, kinds, strict=True))
        if kind == 3  # llama.cpp's CONTROL
    ]
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    split = {
        "type": "Split",
        "pattern": {"Regex": _SPLITS[pre]},
        "behavior": "Isolated",
        "invert": False,
    }
    return json.dumps(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": {"type": "NFC"} if pre == "qwen2" else None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]},
            "post_processor": byte_level,
            "decoder": byte_level,
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": pre == "llama-bpe",
                "vocab": {token: index for index, token in enumerate(tokens)},
                "merges": fields["tokenizer.ggml.merges"],
            },
        }
    )


def bench(
    shared: Path,
    every: int,
    rounds: int,
    work: Path,
    only: Sequence[str] = (),
    vocab: str | None = None,
) -> tuple[list[Timed], list[Pass], list[str]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for case in load_cases(shared):
        if "error" not in case and not case["continue_final_message"]:
            grouped.setdefault(case["template"], []).append(case)
    grouped.setdefault("Qwen-Qwen3-0.6B.jinja", []).append(big_qwen3_case())
    if only:
        grouped = {k: v for k, v in grouped.items() if any(text in k for text in only)}
    timed: list[Timed] = []
    passes: list[Pass] = []
    mismatches: list[str] = []
    for name, cases in sorted(grouped.items()):
        source = (shared / "chat_templates" / name).read_text(encoding="utf-8")
        folder = write_checkpoint(work / name, source, family_tokens(cases), base=vocab)
        engines = Engines(folder)
        agreed_cases = []
        for index, case in enumerate(cases):
            if index % every and not case["id"].startswith("qwen3_big"):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                agreed = engines.agree(case)
                if agreed is None:
                    continue
                if not agreed:
                    mismatches.append(case["id"])
                    continue
                ours, theirs = paired_times(
                    engines.ours(case, cold=True), engines.theirs(case), rounds, 2
                )
                tokenize = fastest(engines.tokenize(case), rounds, 2)
            timed.append(Timed(case["id"], engines.tagged, ours, theirs, tokenize))
            agreed_cases.append(case)
        if agreed_cases:
            our_pass, their_pass = engines.passes(agreed_cases)
            cache = engines.codec.tokenizer.cache
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cache.hits = cache.misses = 0
                our_pass()  # one untimed pass: the pieces it finds kept
                found = cache.hits / max(cache.hits + cache.misses, 1)
                ours, theirs = paired_times(our_pass, their_pass, rounds, 1)
            passes.append(Pass(name, engines.tagged, len(agreed_cases), ours, theirs, found))
    return timed, passes, mismatches


# the templates of the new-text table: two without {% generation %} people fine-tune, one with
FRESH_TEMPLATES = (
    "Qwen-Qwen3-0.6B.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "LFM2.5-8B-A1B.jinja",
)


@dataclass
class Fresh:
    template: str
    tagged: bool
    count: int
    ours: float  # seconds per pass
    theirs: float
    tokenized: float  # chatcodec's tokenizer over the pass's rendered texts, cache emptied first
    tokenizers: float  # the tokenizers package's encode of the same texts


# how a chat model's replies set what a docstring writes plainly (every third one is set so)
TYPESET = (("--", "—"), ("...", "…"), (" '", " ‘"), ("'", "’"), (' "', " “"), ('"', "”"))
# and what a multilingual dataset mixes in (every seventh turn ends with one of these)
ELSEWHERE = ("Merci, c’est très clair.", "¿Qué pasa después?", "谢谢，明白了。", "Größe: 12 µm²")


def docstring_conversations(count: int) -> list[list[dict[str, str]]]:
    """Conversations of text a cache has not seen: paragraphs of the standard library's
    docstrings as the user's and the assistant's turns (1-3 exchanges after a system
    prompt), in an order fixed by a seed; paragraphs are reused only once all are. Every
    third is typeset (curly quotes, dashes, ellipses) and every seventh ends in another
    language, as chat datasets are."""
    import ast
    import random
    import sysconfig

    paragraphs = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                text = ast.get_docstring(node) or ""
                paragraphs += [p.strip() for p in text.split("\n\n") if len(p.strip()) > 40]
    rng = random.Random(0)
    rng.shuffle(paragraphs)
    for index in range(0, len(paragraphs), 3):
        for plain, typeset in TYPESET:
            paragraphs[index] = paragraphs[index].replace(plain, typeset)
    for index in range(0, len(paragraphs), 7):
        paragraphs[index] += " " + ELSEWHERE[index // 7 % len(ELSEWHERE)]
    turns = iter(paragraphs * (1 + 8 * count // max(len(paragraphs), 1)))
    conversations = []
    for _ in range(count):
        messages = [{"role": "system", "content": "You are a helpful assistant."}]
        for _ in range(rng.randint(1, 3)):
            messages.append({"role": "user", "content": next(turns)})
            messages.append({"role": "assistant", "content": next(turns)})
        conversations.append(messages)
    return conversations


def fresh_passes(
    shared: Path, work: Path, count: int, rounds: int, vocab: str | None, only: Sequence[str]
) -> tuple[list[Fresh], list[str]]:
    """One pass per template over ``count`` conversations of new text, both encoders, and
    the tokenizers alone over the rendered texts; the ids (and tag masks) checked first."""
    conversations = docstring_conversations(count)
    grouped: dict[str, list[dict[str, Any]]] = {}
    for case in load_cases(shared):
        grouped.setdefault(case["template"], []).append(case)
    rows: list[Fresh] = []
    mismatches: list[str] = []
    for name in FRESH_TEMPLATES:
        if only and not any(text in name for text in only):
            continue
        source = (shared / "chat_templates" / name).read_text(encoding="utf-8")
        folder = write_checkpoint(
            work / f"fresh-{name}", source, family_tokens(grouped.get(name, [])), base=vocab
        )
        engines = Engines(folder)
        codec, hf = engines.codec, engines.hf
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for index, messages in enumerate(conversations):
                ours = codec.encode(messages)
                theirs = hf.apply_chat_template(
                    messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
                )
                same = ours.input_ids == list(theirs["input_ids"])
                if engines.tagged:
                    same = same and ours.assistant_masks == list(theirs["assistant_masks"])
                if not same:
                    mismatches.append(f"{name} #{index}")
        rows.append(
            Fresh(name, engines.tagged, count, *timed_passes(engines, conversations, rounds))
        )
    return rows, mismatches


def timed_passes(
    engines: Engines, conversations: Sequence[list[dict[str, str]]], rounds: int
) -> tuple[float, float, float, float]:
    """Seconds per pass: both encoders; chatcodec's tokenizer and the tokenizers package's
    encode over the rendered texts."""
    codec, hf = engines.codec, engines.hf
    cache, backend = codec.tokenizer.cache, codec.tokenizer.backend
    texts = [codec.render(messages) for messages in conversations]

    def our_pass() -> None:
        cache.clear()
        for messages in conversations:
            codec.encode(messages)

    def their_pass() -> None:
        for messages in conversations:
            hf.apply_chat_template(
                messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
            )

    def tokenized() -> None:
        cache.clear()
        for text in texts:
            codec.tokenizer.tokenize(text)

    def tokenizers_encode() -> None:
        for text in texts:
            backend.encode(text, add_special_tokens=False)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = paired_times(our_pass, their_pass, rounds, 1)
        ours_tokens, their_tokens = paired_times(tokenized, tokenizers_encode, rounds, 1)
    return ours, theirs, ours_tokens, their_tokens


def fresh_report(rows: Sequence[Fresh], count: int) -> None:
    print(
        f"\nA dataset of new text: {count} conversations of the standard library's docstring "
        "paragraphs (1-3 exchanges each), one pass per template (chatcodec's piece cache "
        "emptied at its start):\n"
    )
    print(
        "| template | {% generation %} | chatcodec conv/s | transformers conv/s | ratio "
        "| tokenizing the pass: chatcodec's tokenizer vs tokenizers' encode |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row.template.removesuffix('.jinja')} | {'yes' if row.tagged else 'no'} "
            f"| {row.count / row.ours:,.0f} | {row.count / row.theirs:,.0f} "
            f"| **{row.theirs / row.ours:.2f}x** | {row.tokenizers / row.tokenized:.2f}x |"
        )


def by_tag(items: Sequence[Any]) -> list[tuple[str, list[Any]]]:
    """The rows of a table: all, then templates with the tag, then without it."""
    return [
        ("all", list(items)),
        ("templates with {% generation %}", [item for item in items if item.tagged]),
        ("templates without it (derived spans)", [item for item in items if not item.tagged]),
    ]


def report(timed: Sequence[Timed], passes: Sequence[Pass]) -> None:
    def row(label: str, items: Sequence[Timed]) -> None:
        if not items:
            return
        ours, theirs = sum(t.ours for t in items), sum(t.theirs for t in items)
        tokenize = sum(t.tokenize for t in items)
        ratios = [t.theirs / t.ours for t in items]
        print(
            f"| {label} | {len(items)} | {len(items) / ours:,.0f} | {len(items) / theirs:,.0f} "
            f"| **{theirs / ours:.2f}x** | {statistics.median(ratios):.2f}x "
            f"({percentile(ratios, 0.1):.2f}-{percentile(ratios, 0.9):.2f}) "
            f"| {tokenize / ours:.0%} | {theirs / tokenize:.2f}x |"
        )

    print(
        "| conversations | n | chatcodec conv/s | transformers conv/s | ratio (total) "
        "| median ratio (p10-p90) | tokenizers' encode, share of chatcodec's time "
        "| ceiling (transformers / tokenizers' encode) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, group in by_tag(timed):
        row(label, group)
    row("big Qwen3 case (40 messages, 5 tools)", [t for t in timed if "qwen3_big" in t.template])

    def pass_row(label: str, items: Sequence[Pass]) -> None:
        if not items:
            return
        count = sum(p.count for p in items)
        ours, theirs = sum(p.ours for p in items), sum(p.theirs for p in items)
        found = sum(p.found * p.count for p in items) / count
        print(
            f"| {label} | {len(items)} | {count} | {count / ours:,.0f} | {count / theirs:,.0f} "
            f"| **{theirs / ours:.2f}x** | {found:.0%} |"
        )

    print(
        "\nOne pass per template over its conversations, each encoded once (chatcodec's piece "
        "cache emptied at the start of each pass):\n"
    )
    print(
        "| passes | templates | conversations | chatcodec conv/s | transformers conv/s "
        "| ratio | pieces found kept |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, group in by_tag(passes):
        pass_row(label, group)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--quick", action="store_true", help="every 5th conversation, 3 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="only the templates whose file name contains TEXT (repeatable)",
    )
    parser.add_argument(
        "--fresh",
        type=int,
        default=None,
        metavar="N",
        help="conversations of new text in the dataset table (default 1500; 0: no such table)",
    )
    parser.add_argument(
        "--vocab",
        type=Path,
        metavar="FILE.gguf",
        help="a real vocabulary instead of the tests' small BPE: llama.cpp's "
        "models/ggml-vocab-qwen2.gguf or ggml-vocab-llama-bpe.gguf (or a GGUF of those families)",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 5)
    vocab = None if args.vocab is None else vocab_tokenizer_json(args.vocab)
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        timed, passes, mismatches = bench(
            args.shared, 5 if args.quick else 1, rounds, Path(work), args.only, vocab
        )
    if not timed:
        print("no conversation to time (--only matched no template?)")
        return 1
    print(f"{len(timed)} conversations timed in {time.perf_counter() - started:.0f} s")
    tokenizer = args.vocab or "the tests' byte-level BPE"
    print(f"tokenizer: {tokenizer}, the template's markers added\n")
    print("Each conversation alone, its pieces and words new to chatcodec's cache:\n")
    report(timed, passes)
    fresh = 1500 if args.fresh is None else args.fresh
    if fresh:
        with tempfile.TemporaryDirectory() as work:
            rows, differ = fresh_passes(args.shared, Path(work), fresh, rounds, vocab, args.only)
        fresh_report(rows, fresh)
        mismatches += differ
    if mismatches:
        print(f"\n{len(mismatches)} conversations differ: {mismatches[:10]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
