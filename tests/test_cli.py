"""The chatcodec command, run as a user runs it: a real subprocess, files and pipes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chatcodec import ChatTemplate

from .conftest import ROOT, TEMPLATES, read_jsonl, shared_path, template_source

EXAMPLE = ROOT / "examples" / "conversation.json"
QWEN3 = "Qwen-Qwen3-0.6B.jinja"


def chatcodec(*args: str, stdin: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatcodec", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_render_prints_the_exact_prompt_without_a_trailing_newline() -> None:
    path = shared_path("chat_templates", QWEN3)
    request = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    result = chatcodec("render", str(path), str(EXAMPLE), "--add-generation-prompt")
    assert result.returncode == 0, result.stderr
    expected = ChatTemplate(template_source(QWEN3)).render(
        request["messages"], tools=request["tools"], add_generation_prompt=True
    )
    assert result.stdout == expected


def test_render_reads_stdin_and_takes_vars_tools_and_now(tmp_path: Path) -> None:
    path = shared_path("chat_templates", "meta-llama-Llama-3.1-8B-Instruct.jinja")
    messages = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    result = chatcodec(
        "render",
        str(path),
        "--tools",
        str(tools_file),
        "--var",
        "bos_token=<|begin_of_text|>",
        "--var",
        "date_string=26 Jul 2026",
        "--now",
        "2026-07-26T12:00:00Z",
        "-g",
        stdin=json.dumps(messages),
    )
    assert result.returncode == 0, result.stderr
    template = ChatTemplate(path.read_text(encoding="utf-8"))
    assert result.stdout == template.render(
        messages,
        tools=tools,
        add_generation_prompt=True,
        now=1785067200,
        bos_token="<|begin_of_text|>",
        date_string="26 Jul 2026",
    )
    assert "26 Jul 2026" in result.stdout


def test_render_spans_prints_json() -> None:
    path = shared_path("chat_templates", QWEN3)
    messages = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A"},
    ]
    result = chatcodec("render", str(path), "--spans", stdin=json.dumps(messages))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [report["prompt"][a:b] for a, b in report["spans"]] == [
        "<think>\n\n</think>\n\nA<|im_end|>"
    ]


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["render", "missing-dir/nothing.jinja"], "[]", "nothing.jinja"),
        (["render", "{template}"], "not json", "not valid JSON"),
        (["render", "{template}", "--var", "novalue"], "[]", "key=value"),
        (["render", "{template}", "--now", "yesterday"], "[]", "--now"),
        (["render", "{template}"], "[]", "empty conversation"),
    ],
)
def test_bad_input_is_one_clear_line_on_stderr(args: list[str], stdin: str, message: str) -> None:
    path = str(shared_path("chat_templates", QWEN3))
    result = chatcodec(*[a.replace("{template}", path) for a in args], stdin=stdin)
    assert result.returncode in (1, 2)
    assert result.stdout == ""
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_inspect_reports_origin_tokens_capabilities_and_variables(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "chat_template.jinja").write_text(template_source(QWEN3), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}), encoding="utf-8"
    )
    result = chatcodec("inspect", str(folder), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "chat_template.jinja" in report["origin"]
    assert report["special_tokens"]["eos_token"] == "<|im_end|>"
    assert report["capabilities"]["tools"] is True
    assert report["capabilities"]["thinking_toggle"] is True
    assert "enable_thinking" in report["variables"]
    text = chatcodec("inspect", str(folder))
    assert text.returncode == 0, text.stderr
    assert "capabilities:" in text.stdout and "enable_thinking" in text.stdout


def test_batch_replays_the_render_oracle() -> None:
    cases = read_jsonl(shared_path("oracle", "render", "expectations.jsonl"))
    chosen = cases[::40]  # a spread over every template and shape, errors included
    stdin = "".join(json.dumps(case) + "\n" for case in chosen) + "\n{broken\n"
    result = chatcodec("batch", "--templates", str(TEMPLATES), stdin=stdin)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == len(chosen) + 1
    for case, line in zip(chosen, lines[:-1], strict=True):
        assert line["id"] == case["id"]
        if "error" in case:
            assert line["error"]["type"] == case["error"]["type"]
        else:
            assert line["rendered"] == case["expected"]
    assert lines[-1]["error"]["type"] == "UsageError"
    assert result.stderr == ""  # no progress bar when stderr is not a terminal


def test_batch_names_a_missing_template() -> None:
    request = {
        "id": "x",
        "template": "no-such.jinja",
        "messages": [{"role": "user", "content": "x"}],
    }
    result = chatcodec("batch", stdin=json.dumps(request) + "\n")
    assert result.returncode == 0
    line = json.loads(result.stdout)
    assert "no-such.jinja" in line["error"]["message"]


def test_render_openai_messages_converts_them_for_the_template() -> None:
    path = shared_path("chat_templates", QWEN3)
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
    ]
    raw = chatcodec("render", str(path), stdin=json.dumps(messages))
    assert raw.returncode == 1  # Qwen3 reads message.content, which a null leaves undefined
    converted = chatcodec("render", str(path), "--openai", stdin=json.dumps(messages))
    assert converted.returncode == 0, converted.stderr
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in converted.stdout


def test_parse_reads_a_checkpoint_and_streams_deltas_that_fold_to_the_message(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "coder"
    folder.mkdir()
    (folder / "chat_template.jinja").write_text(template_source("Qwen3-Coder.jinja"), "utf-8")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    reply = (
        "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n</function>\n</tool_call>"
    )
    whole = chatcodec("parse", str(folder), "--tools", str(tools_file), stdin=reply)
    assert whole.returncode == 0, whole.stderr
    message = json.loads(whole.stdout)
    assert message["content"] == "Let me check.\n"
    assert [c["function"] for c in message["tool_calls"]] == [
        {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    ]
    streamed = chatcodec(
        "parse", str(folder), "--tools", str(tools_file), "--stream", "--chunk", "3", stdin=reply
    )
    assert streamed.returncode == 0, streamed.stderr
    *deltas, final = [json.loads(line) for line in streamed.stdout.splitlines()]
    assert "".join(d.get("content", "") for d in deltas) == message["content"]
    arguments = "".join(
        call["function"].get("arguments", "") for d in deltas for call in d.get("tool_calls", [])
    )
    assert arguments == '{"city":"Paris"}'
    assert final["tool_calls"][0]["function"] == message["tool_calls"][0]["function"]


def test_parse_continues_a_final_message_and_reads_a_response_format(tmp_path: Path) -> None:
    template = TEMPLATES / "Qwen3.5-4B.jinja"
    messages = tmp_path / "messages.json"
    final = {"role": "assistant", "content": "Hello, ", "reasoning_content": "hmm"}
    messages.write_text(json.dumps([{"role": "user", "content": "Hey"}, final]), "utf-8")
    args = ("parse", str(template), "--messages", str(messages))
    continued = chatcodec(*args, "--continue", stdin="world")
    assert continued.returncode == 0, continued.stderr
    assert json.loads(continued.stdout)["content"] == "Hello, world"
    fresh = chatcodec(*args, "--no-continue", stdin="world")
    assert json.loads(fresh.stdout) == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "world",
    }
    response_format = tmp_path / "format.json"
    response_format.write_text('{"type": "json_object"}', "utf-8")
    llama = TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja"
    fenced = chatcodec(
        "parse",
        str(llama),
        "--response-format",
        str(response_format),
        stdin='```json\n{"a": 1}\n```',
    )
    assert fenced.returncode == 0, fenced.stderr
    assert json.loads(fenced.stdout)["content"] == '{"a": 1}'


@pytest.mark.parametrize(
    ("name", "handler", "marker"),
    [
        ("Qwen3-Coder.jinja", "Qwen3-Coder", "<tool_call>"),
        ("openai-gpt-oss-120b.jinja", "GPT-OSS", "<|channel|>"),
        ("Qwen-Qwen3-0.6B.jinja", "autoparser", "<think>\n"),
    ],
)
def test_inspect_shows_the_reply_format(name: str, handler: str, marker: str) -> None:
    result = chatcodec("inspect", str(shared_path("chat_templates", name)), "--json")
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)["reply"]
    assert reply["handler"] == handler
    assert json.dumps(marker, ensure_ascii=False)[1:-1] in json.dumps(reply, ensure_ascii=False)
