"""The text llama.cpp's grammar sampler judges of a reply (tests/_grammar_replies.py), on
hand-made setups whose outcome follows from llama.cpp's lazy-grammar rule."""

from __future__ import annotations

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
