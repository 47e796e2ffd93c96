"""The round trip of training data (issue 11): each assistant turn of a rendered conversation,
read by the decoder prepared on the conversation before it, gives the message back, or the
check says why not. Checked on the render corpus's conversations and real templates."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.checkdata import REASONS, DataReport, check_data, check_turns

from .conftest import ROOT, read_jsonl, shared_path, template_source


@cache
def _cases() -> dict[str, dict[str, Any]]:
    cases = read_jsonl(shared_path("oracle", "render", "expectations.jsonl"))
    return {case["id"]: case for case in cases}


@cache
def _codec(template: str, bos: str | None, eos: str | None) -> Codec:
    return Codec(template_source(template), bos_token=bos, eos_token=eos)


def _check(case_id: str) -> Any:
    case = _cases()[case_id]
    kwargs = dict(case["kwargs"] or {})
    codec = _codec(case["template"], kwargs.pop("bos_token", None), kwargs.pop("eos_token", None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check_turns(
            codec,
            case["messages"],
            case["tools"],
            case["documents"],
            now=case["now_unix"],
            id=case_id,
            **kwargs,
        )


def _reasons(case_id: str) -> dict[int, tuple[str, ...]]:
    return {turn.index: turn.reasons for turn in _check(case_id).turns}


def test_plain_turns_and_tool_calls_read_back() -> None:
    for case_id in (
        "Qwen-Qwen2.5-7B-Instruct__tool_call_then_answer__agp1",
        "Qwen-Qwen2.5-7B-Instruct__multi_turn__agp1",
        "meta-llama-Llama-3.1-8B-Instruct__tool_call_then_answer__agp1",
        "Qwen3-Coder__tool_call_parallel__agp1",
        "Qwen-Qwen3-0.6B__tool_args_json_string__agp1",  # Qwen3 writes the text as an object
    ):
        check = _check(case_id)
        assert check.ok and check.turns, (case_id, [t.to_dict() for t in check.turns])
        assert all(turn.read == turn.expected for turn in check.turns)


def test_what_does_not_read_back_is_named() -> None:
    # Qwen3 renders no thought for a turn before the last user message
    assert _reasons("Qwen-Qwen3-0.6B__reasoning_past_turn__agp1") == {1: ("reasoning_dropped",)}
    # arguments kept as JSON text: Qwen2.5's template writes a JSON string, read as no object
    assert _reasons("Qwen-Qwen2.5-7B-Instruct__tool_args_json_string__agp1") == {
        1: ("tool_calls_differ",)
    }
    # calls in a conversation that offers no tools: a server reads none
    assert _reasons("Qwen-Qwen3-0.6B__tool_history_without_tools__agp1") == {
        2: ("content_differs", "tool_calls_without_tools")
    }
    # QwQ's generation prompt opens <think>, its turns in history have none
    assert _reasons("Qwen-QwQ-32B__multi_turn__agp1") == {2: ("prompt_opens_thought",)}


def test_a_failing_turn_carries_its_text_and_what_was_read() -> None:
    turn = _check("Qwen-Qwen2.5-7B-Instruct__tool_args_json_string__agp1").turns[0]
    assert turn.expected is not None and turn.read is not None
    assert turn.expected["tool_calls"][0]["arguments"] == {
        "location": "Paris, France",
        "unit": "celsius",
    }
    assert turn.read["tool_calls"] == [{"name": "get_weather", "arguments": {}}]
    assert turn.text.startswith("<tool_call>\n")
    row = turn.to_dict()
    assert row["ok"] is False and row["reasons"] == ["tool_calls_differ"]


SHAPES = ("multi_turn", "tool_call_then_answer", "reasoning_past_turn", "tool_call_parallel")


def test_every_template_of_the_corpus_is_checked_with_named_reasons() -> None:
    report = DataReport()
    templates = set()
    for case_id, case in _cases().items():
        if "error" in case or case["shape"] not in SHAPES or not case["add_generation_prompt"]:
            continue
        if "__" in case_id.split("__agp1", 1)[1]:
            continue  # the knob variants
        check = _check(case_id)
        templates.add(case["template"])
        report.add(check)
        for turn in check.turns:
            assert set(turn.reasons) <= REASONS.keys(), turn
            assert turn.ok or turn.detail, turn
    assert len(templates) == 70
    counts = report.to_dict()
    assert (
        sum(c["good_turns"] for c in counts.values()) > sum(c["turns"] for c in counts.values()) / 3
    )


def test_records_of_a_dataset_are_checked_in_order() -> None:
    case = _cases()["Qwen-Qwen2.5-7B-Instruct__tool_call_then_answer__agp1"]
    codec = _codec(case["template"], None, "<|im_end|>")
    records = [
        {"id": "a", "messages": case["messages"], "tools": case["tools"]},
        {"messages": "not a list"},
        {"id": "c", "messages": case["messages"]},  # calls, no tools
    ]
    first, second, third = check_data(codec, records, now=case["now_unix"])
    assert first.ok and first.id == "a" and len(first.turns) == 2
    assert second.id == 1 and second.error == "the record has no 'messages' list"
    assert not third.ok
    assert third.turns[0].reasons == ("content_differs", "tool_calls_without_tools")


def _dataset(tmp_path: Path) -> Path:
    rows = []
    for case in _cases().values():
        if case["template"] == "Qwen-Qwen2.5-7B-Instruct.jinja" and "error" not in case:
            if case["add_generation_prompt"] and not case["continue_final_message"]:
                kwargs = {k: v for k, v in case["kwargs"].items() if not k.endswith("_token")}
                rows.append(
                    {
                        "id": case["id"],
                        "messages": case["messages"],
                        "tools": case["tools"],
                        "documents": case["documents"],
                        "chat_template_kwargs": kwargs,
                    }
                )
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "[1]\n", encoding="utf-8")
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    template = str(shared_path("chat_templates", "Qwen-Qwen2.5-7B-Instruct.jinja"))
    command = [sys.executable, "-m", "chatcodec", "check-data", template]
    command += ["--eos-token", "<|im_end|>", "--now", "1741165623", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_the_command_reports_per_template_and_per_conversation(tmp_path: Path) -> None:
    path = _dataset(tmp_path)
    human = _run(str(path), "--show", "2")
    assert human.returncode == 1, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].split() == [
        "template",
        "conversations",
        "failing",
        "turns",
        "read",
        "back",
        "reasons",
    ]
    assert lines[1].startswith("default ")
    assert human.stdout.count("\nconversation ") >= 2
    assert "tool_calls_differ: the tool calls read back differ" in human.stdout
    one = _run(str(path), "--json")
    two = _run(str(path), "--json", "--jobs", "2")
    assert one.returncode == two.returncode == 1
    assert one.stdout == two.stdout
    rows = [json.loads(line) for line in one.stdout.splitlines()]
    *conversations, summary = rows
    assert conversations[-1] == {
        "id": None,
        "template": None,
        "ok": False,
        "error": f"{path}: line {len(conversations)} is not a JSON object",
        "turns": [],
    }
    counts = summary["summary"]["default"]
    assert counts["conversations"] == len(conversations)
    assert counts["failed_conversations"] == sum(not row["ok"] for row in conversations)
    assert counts["reasons"]["tool_calls_differ"] == 2


def test_the_command_passes_a_clean_dataset(tmp_path: Path) -> None:
    case = _cases()["Qwen-Qwen2.5-7B-Instruct__tool_call_then_answer__agp1"]
    path = tmp_path / "clean.jsonl"
    path.write_text(json.dumps({"messages": case["messages"], "tools": case["tools"]}) + "\n")
    run = _run(str(path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.endswith("\n0 of 1 conversations have a turn that does not read back\n")


def test_the_report_names_a_line_that_cannot_be_read_by_its_place(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text("not json\n", encoding="utf-8")
    run = _run(str(path))
    assert run.returncode == 1, run.stderr
    assert f"\n{path}: line 1 is not valid JSON: " in run.stdout
    assert "conversation None" not in run.stdout


@pytest.mark.parametrize(
    "bad", [["--jobs", "x"], ["--var", "messages=[]"], ["--var", "add_generation_prompt=true"]]
)
def test_the_command_refuses_bad_options(bad: list[str], tmp_path: Path) -> None:
    run = _run(str(_dataset(tmp_path)), *bad)
    assert run.returncode == 2 and run.stdout == ""


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GREETING = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


@pytest.mark.parametrize(
    ("variables", "error"),
    [
        *(
            pytest.param(
                {name: []},
                f"RequestError: chat_template_kwargs cannot set {name!r}: a check option",
                id=name,
            )
            for name in (
                "messages",
                "tools",
                "documents",
                "add_generation_prompt",
                "continue_final_message",
                "id",
                "self",
            )
        ),
        pytest.param(
            [1], "RequestError: chat_template_kwargs must be an object, not list", id="list"
        ),
    ],
)
def test_a_row_whose_variables_clash_is_one_error_and_the_run_goes_on(
    variables: Any, error: str
) -> None:
    # such a row used to end the whole run with a TypeError (check_turns given it twice)
    codec = Codec(CHATML, eos_token="<|im_end|>")
    records = [
        {"id": "bad", "messages": GREETING, "chat_template_kwargs": variables},
        {"id": "good", "messages": GREETING},
    ]
    bad, good = check_data(codec, records)
    assert (bad.id, bad.ok, bad.error, bad.turns) == ("bad", False, error, ())
    assert good.ok and good.id == "good" and len(good.turns) == 1


def test_the_command_reports_a_clashing_row_and_checks_the_next(tmp_path: Path) -> None:
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    rows = [
        {"id": "bad", "messages": GREETING, "chat_template_kwargs": {"messages": []}},
        {"id": "good", "messages": GREETING},
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    command = [sys.executable, "-m", "chatcodec", "check-data", str(template), str(path)]
    run = subprocess.run(
        [*command, "--eos-token", "<|im_end|>", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    bad, good, summary = (json.loads(line) for line in run.stdout.splitlines())
    assert bad["ok"] is False and bad["error"] == (
        "RequestError: chat_template_kwargs cannot set 'messages': a check option"
    )
    assert good["id"] == "good" and good["ok"] is True
    assert summary["summary"]["default"]["conversations"] == 2


def test_the_command_line_refuses_the_keywords_the_check_refuses() -> None:
    """cli.py keeps its own copy of check-data's keywords (importing checkdata there would load
    jinja for every command): the two must not drift apart."""
    from chatcodec import cli
    from chatcodec.checkdata import OWN_KEYWORDS

    assert cli._OWN_KEYWORDS["check-data"] == OWN_KEYWORDS
