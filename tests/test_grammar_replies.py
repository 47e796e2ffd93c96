"""The text llama.cpp's grammar sampler judges of a reply (tests/_grammar_replies.py): on
hand-made setups whose outcome follows from llama.cpp's lazy-grammar rule, then against
llama.cpp's own lazy grammar sampler (llama-cpp-python, skipped when it or gguf is missing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chatcodec.grammar import format_literal
from chatcodec.grammar.constraint import Grammar, Trigger

from ._grammar_replies import grammar_input, judged_text, trigger_start

GEN = "<|im_start|>assistant\n"


def lazy(*triggers: tuple[str, str]) -> Grammar:
    return Grammar("root ::= [^\\x00]*", True, tuple(Trigger(t, v) for t, v in triggers))


def test_a_whole_grammar_judges_the_generation_prompt_and_the_reply() -> None:
    whole = Grammar('root ::= "x"')
    assert judged_text(whole, GEN, "Hello") == GEN + "Hello"


def test_a_word_starts_the_text_at_its_first_occurrence() -> None:
    g = lazy(("word", "<tool_call>"))
    reply = "Sure. <tool_call>a</tool_call><tool_call>b"
    assert judged_text(g, GEN, reply) == "<tool_call>a</tool_call><tool_call>b"
    assert judged_text(g, GEN, "no call here") is None


def test_the_trigger_completed_first_wins_over_the_order_of_the_triggers() -> None:
    # the buffer is tried after every byte: <b> is complete before <aaaa> is
    g = lazy(("word", "<aaaa>"), ("word", "<b>"))
    assert judged_text(g, GEN, "x <b> <aaaa>") == "<b> <aaaa>"
    # completed on the same byte: the first in llama.cpp's order
    g = lazy(("word", "ab>"), ("word", "b>"))
    assert trigger_start(g.triggers, b"xab>") == 1
    g = lazy(("word", "b>"), ("word", "ab>"))
    assert trigger_start(g.triggers, b"xab>") == 2


def test_a_pattern_starts_at_its_first_capture_group_that_matched_something() -> None:
    g = lazy(("pattern", "<\\|start\\|>assistant(\\s+to)"))
    assert judged_text(g, GEN, "x<|start|>assistant to=functions.f") == " to=functions.f"
    g = lazy(("pattern", "(?:^|<s>)( to=[^<]*?<m>)"))
    assert judged_text(g, GEN, "a<s> to=x<m>{}") == " to=x<m>{}"


def test_a_pattern_is_tried_on_every_prefix_of_the_buffer() -> None:
    # anchored: the buffer " to" matches before the rest of the reply arrives
    g = lazy(("pattern", "^\\s+to$"))
    assert judged_text(g, GEN, " to=functions.get") == " to=functions.get"
    # a lookahead at the end of the buffer cannot see what comes next
    g = lazy(("pattern", ">>>(?!all)"))
    assert judged_text(g, GEN, ">>>all\nhello") == ">>>all\nhello"
    # pattern_full: the whole buffer, from its start
    g = lazy(("pattern_full", "\\[CALL\\]"))
    assert judged_text(g, GEN, "[CALL]{}") == "[CALL]{}"
    assert judged_text(g, GEN, "x[CALL]{}") is None


def test_ecmascript_dollar_and_dot() -> None:
    # $ is the end of the buffer only (Python's $ also matches before a final newline)
    g = lazy(("pattern", "^go$"))
    assert judged_text(g, GEN, "gone") == "gone"
    assert judged_text(g, GEN, "xgo") is None
    # . does not match \r
    g = lazy(("pattern", "a.b"))
    assert judged_text(g, GEN, "a\rb a-b") == "a-b"


def test_thoughts_do_not_reach_a_lazy_grammar_beside_a_reasoning_budget() -> None:
    thinking = ("<think>", ("</think>",))
    g = lazy(("word", "<tool_call>"))
    reply = "<think>maybe <tool_call>x</think>\n<tool_call>y"
    assert judged_text(g, GEN, reply) == "<tool_call>x</think>\n<tool_call>y"
    assert judged_text(g, GEN, reply, thinking) == "<tool_call>y"
    # the generation prompt opens the thought; its end tag is replayed to the grammar
    assert grammar_input(GEN + "<think>\n", "a <b> c</think>rest", thinking) == b"</think>rest"
    # the longest end tag that ends on a byte is the one replayed
    tags = ("<think>", ("</think>", "\n</think>"))
    assert grammar_input("<think>", "a\n</think>b", tags) == b"\n</think>b"


# ------------------------------------------------------------------ against llama.cpp's sampler

# llama.cpp's lazy grammar sampler (llama-cpp-python's libllama) over a vocabulary of byte
# tokens, one sampler per check: fed the reply byte by byte, each token checked first (a token
# the grammar refuses ends the reply), then the end token; then whether the grammar is awake (a
# grammar complete after the reply refuses one more byte; an idle one lets anything through).
# A grammar that refuses the text a trigger replays raises inside llama.cpp, which ends the
# process: the checks after it run in a new one.
SAMPLER = r"""
import ctypes, json, sys
import llama_cpp
llama_cpp.llama_backend_init()
params = llama_cpp.llama_model_default_params()
params.vocab_only = True
checks = json.loads(sys.stdin.read())
model = llama_cpp.llama_model_load_from_file(checks[0]["model"].encode(), params)
vocab = llama_cpp.llama_model_get_vocab(model)

def allowed(sampler, token):
    data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
    candidates = llama_cpp.llama_token_data_array(data, 1, -1, False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
    return data[0].logit != float("-inf")

def run(check):
    patterns = [p.encode() for p in check["patterns"]]
    sampler = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
        vocab, check["grammar"].encode(), b"root",
        (ctypes.c_char_p * len(patterns))(*patterns), len(patterns), None, 0)
    for byte in check["reply"].encode():
        if not allowed(sampler, 3 + byte):
            return "reject"
        llama_cpp.llama_sampler_accept(sampler, 3 + byte)
    verdict = "accept" if allowed(sampler, 2) else "incomplete"
    return verdict + (" idle" if allowed(sampler, 3 + ord("~")) else " awake")

for check in checks:
    print(run(check), flush=True)
"""

SAMPLER_CASES = [
    ([("word", "<tool_call>")], "Sure. <tool_call>a</tool_call>"),
    ([("word", "<aaaa>"), ("word", "<b>")], "x <b> <aaaa>"),
    ([("word", "ab>"), ("word", "b>")], "xab>yz"),
    ([("word", "b>"), ("word", "ab>")], "xab>yz"),
    ([("pattern", "<\\|start\\|>assistant(\\s+to)")], "x<|start|>assistant to=functions.f"),
    ([("pattern", "^\\s+to$")], " to=functions.get"),
    ([("pattern", ">>>(?!all)")], ">>>all\nhello"),
    ([("pattern_full", "\\[CALL\\]")], "[CALL]{}"),
    ([("pattern_full", "\\[CALL\\]")], "x[CALL]{}"),
    ([("pattern", "^go$")], "xgo"),
    ([("pattern", "a.b")], "a\rb a-b"),
    ([("word", "<tool_call>")], "é café <tool_call>ü"),
    (
        [
            ("pattern", "<\\|start\\|>assistant(<\\|channel\\|>(?:commentary|analysis)\\s+to)"),
            ("pattern", "<\\|start\\|>assistant(\\s+to)"),
            ("pattern", "^<\\|channel\\|>(?:commentary|analysis)\\s+to=functions$"),
            ("pattern", "^\\s+to$"),
        ],
        "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>commentary"
        " to=functions.get <|message|>{}",
    ),
    (
        [
            (
                "pattern",
                "(?:^|<\\|start\\|>assistant)( to=(?!self<\\|message\\|>)[^<]*?<\\|message\\|>)",
            )
        ],
        "Hi<|start|>assistant to=self<|message|>x<|start|>assistant to=f<|message|>{}",
    ),
]


@pytest.fixture(scope="module")
def byte_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("llama_cpp")
    from ._llama import write_model

    return write_model(tmp_path_factory.mktemp("vocab") / "tiny.gguf")


@pytest.fixture(scope="module")
def sampled(byte_vocab: Path) -> list[str]:
    """llama.cpp's outcome of each SAMPLER_CASES reply under a grammar of exactly its judged
    text (``raised``: llama.cpp refused the text the trigger replayed)."""
    from ._llama import trigger_patterns

    checks = []
    for triggers, reply in SAMPLER_CASES:
        judged = judged_text(lazy(*triggers), GEN, reply)
        grammar = 'root ::= "\\x01"' if judged is None else f"root ::= {format_literal(judged)}"
        patterns = trigger_patterns(lazy(*triggers))
        checks.append(
            {"model": str(byte_vocab), "patterns": patterns, "grammar": grammar, "reply": reply}
        )
    outcomes: list[str] = []
    while len(outcomes) < len(checks):
        done = subprocess.run(
            [sys.executable, "-c", SAMPLER],
            input=json.dumps(checks[len(outcomes) :]),
            capture_output=True,
            text=True,
            timeout=300,
        )
        outcomes += [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 and len(outcomes) < len(checks):
            outcomes.append("raised")
    return outcomes


@pytest.mark.parametrize("index", range(len(SAMPLER_CASES)))
def test_llama_cpps_lazy_sampler_is_given_the_judged_text(sampled: list[str], index: int) -> None:
    """Under a grammar of exactly the judged text, llama.cpp's sampler accepts the reply with
    the grammar awake (the trigger fired where predicted: a start elsewhere gives the grammar
    another text, which it refuses); with no judged text, the grammar stays idle."""
    triggers, reply = SAMPLER_CASES[index]
    judged = judged_text(lazy(*triggers), GEN, reply)
    assert sampled[index] == ("accept idle" if judged is None else "accept awake")
