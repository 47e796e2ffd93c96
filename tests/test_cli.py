"""The chatcodec command, run as a user runs it: a real subprocess, files and pipes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chatcodec import ChatTemplate, Codec, load

from .conftest import ROOT, read_jsonl, shared_path, template_source

EXAMPLE = ROOT / "examples" / "conversation.json"
# the example checkpoint written for the README: these tests run on a fresh clone
CHECKPOINT = ROOT / "examples" / "chatml-tiny"
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


def test_the_readme_command_renders_the_example_checkpoint_exactly() -> None:
    request = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    result = chatcodec("render", str(CHECKPOINT), str(EXAMPLE), "--add-generation-prompt")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    expected = load(CHECKPOINT).render(
        request["messages"], tools=request["tools"], add_generation_prompt=True
    )
    assert result.stdout == expected  # the exact bytes, no newline added
    assert result.stdout.endswith("<|im_start|>assistant\n")
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in expected


def test_render_prints_the_exact_prompt_of_a_shared_template() -> None:
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
    ("args", "stdin", "status", "message"),
    [
        (["render", "missing-dir/nothing.jinja"], "[]", 1, "CheckpointError"),
        (["render", "{ckpt}"], "not json", 2, "messages in stdin is not valid JSON"),
        (["render", "{ckpt}", "--var", "novalue"], "[]", 2, "--var takes key=value"),
        (["render", "{ckpt}", "--now", "yesterday"], "[]", 2, "--now takes unix seconds"),
        (["render", "{ckpt}"], "[]", 1, "TemplateArgumentError: Cannot apply chat template"),
        (["render", "{ckpt}", "--template-name", "rag"], "[]", 1, "TemplateNotFoundError"),
        (["render", "{ckpt}", "--tools", "no-such.json"], "[]", 2, "no-such.json"),
        (["parse", "missing-dir/nothing.jinja"], "x", 1, "CheckpointError"),
        (["parse", "{ckpt}", "--var", "novalue"], "x", 2, "--var takes key=value"),
        (["parse", "{ckpt}", "--now", "2026-01-01T00:00"], "x", 2, "--now needs a time zone"),
        (["parse", "{ckpt}", "--messages", "no-such.json"], "x", 2, "no-such.json"),
        (["parse", "{ckpt}", "--template-name", "rag"], "x", 1, "TemplateNotFoundError"),
        (["inspect", "missing-dir/nothing.jinja"], "", 1, "CheckpointError"),
        (["render"], "", 2, "CHECKPOINT"),
        # a --tool-choice other than auto/required/none names the one tool to call
        (["parse", "{ckpt}", "--tool-choice", "sometimes"], "x", 1, "names the tool 'sometimes'"),
        (["parse", "{ckpt}", "--reasoning-format", "xyz"], "x", 2, "invalid choice"),
    ],
)
def test_bad_input_is_one_line_naming_the_command_and_the_file(
    args: list[str], stdin: str, status: int, message: str
) -> None:
    result = chatcodec(*[a.replace("{ckpt}", str(CHECKPOINT)) for a in args], stdin=stdin)
    assert result.returncode == status, result.stderr
    assert result.stdout == ""
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    if not result.stderr.startswith("usage:"):  # argparse's own errors print the usage first
        checkpoint = args[1].replace("{ckpt}", str(CHECKPOINT))
        assert result.stderr.startswith(f"chatcodec {args[0]}: {checkpoint}: ")
        assert result.stderr.count("\n") == 1


def test_render_and_parse_share_their_option_spellings() -> None:
    def options(command: str) -> set[str]:
        text = chatcodec(command, "--help").stdout
        return {word.strip("[],") for word in text.split() if word.startswith(("--", "[--"))}

    render, parse, inspect = options("render"), options("parse"), options("inspect")
    shared = {"--template-name", "--bos-token", "--eos-token"}
    assert shared <= render & parse & inspect
    assert {"--tools", "--var", "--now", "--no-thinking", "--continue-final-message"} <= (
        render & parse
    )
    for command in ("render", "parse", "inspect"):
        assert "CHECKPOINT" in chatcodec(command, "--help").stdout


def test_a_keyword_the_template_never_reads_is_one_warning_line() -> None:
    result = chatcodec(
        "render",
        str(CHECKPOINT),
        str(EXAMPLE),
        "--var",
        "add_generation_promt=true",
        "--var",
        "enable_thinking=false",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"chatcodec render: {CHECKPOINT}: warning: the chat template never reads "
        "'add_generation_promt', so passing it changes nothing; did you mean "
        "'add_generation_prompt'?\n"
    )
    assert not result.stdout.endswith("<|im_start|>assistant\n")  # no generation prompt


def test_render_and_parse_take_the_same_request_options(tmp_path: Path) -> None:
    request = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(request["tools"]), encoding="utf-8")
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(request["messages"]), encoding="utf-8")
    common = ("--tools", str(tools), "--no-thinking", "--bos-token", "<s>", "--now", "0")
    prompt = chatcodec("render", str(CHECKPOINT), str(messages), "-g", *common)
    assert prompt.returncode == 0, prompt.stderr
    assert prompt.stdout.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "get_weather" in prompt.stdout
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call>'
    parsed = chatcodec("parse", str(CHECKPOINT), "--messages", str(messages), *common, stdin=reply)
    assert parsed.returncode == 0, parsed.stderr
    message = json.loads(parsed.stdout)
    assert not message["content"]  # "" or null beside calls (the OpenAI shape is the face's)
    assert [call["function"] for call in message["tool_calls"]] == [
        {"name": "get_weather", "arguments": '{"city": "Lyon"}'}
    ]
    # the thinking switch reaches the reply format too: with it on, <think> is read as thought
    thought = chatcodec(
        "parse", str(CHECKPOINT), "--messages", str(messages), stdin="<think>\nhm\n</think>\n\nOK"
    )
    assert thought.returncode == 0, thought.stderr
    answer = json.loads(thought.stdout)
    assert (answer["reasoning_content"].strip(), answer["content"]) == ("hm", "OK")


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
    result = chatcodec("batch", "--templates", str(shared_path("chat_templates")), stdin=stdin)
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
    template = shared_path("chat_templates", "Qwen3.5-4B.jinja")
    messages = tmp_path / "messages.json"
    final = {"role": "assistant", "content": "Hello, ", "reasoning_content": "hmm"}
    messages.write_text(json.dumps([{"role": "user", "content": "Hey"}, final]), "utf-8")
    args = ("parse", str(template), "--messages", str(messages))
    continued = chatcodec(*args, "--continue-final-message", stdin="world")
    assert continued.returncode == 0, continued.stderr
    assert json.loads(continued.stdout)["content"] == "Hello, world"
    fresh = chatcodec(*args, "--no-continue-final-message", stdin="world")
    assert json.loads(fresh.stdout) == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "world",
    }
    response_format = tmp_path / "format.json"
    response_format.write_text('{"type": "json_object"}', "utf-8")
    llama = shared_path("chat_templates", "meta-llama-Llama-3.1-8B-Instruct.jinja")
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


def test_inspect_and_batch_run_on_the_example_checkpoint() -> None:
    report = chatcodec("inspect", str(CHECKPOINT), "--json")
    assert report.returncode == 0, report.stderr
    found = json.loads(report.stdout)
    assert found["special_tokens"] == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    assert found["capabilities"]["tools"] and found["capabilities"]["thinking_toggle"]
    assert found["reply"]["handler"] == "autoparser"
    template = str(CHECKPOINT / "chat_template.jinja")
    user = [{"role": "user", "content": "Hi"}]
    requests = [
        {"id": "r", "template": template, "messages": user, "add_generation_prompt": True},
        {"id": "e", "template": template, "messages": []},
        {
            "id": "p",
            "template": template,
            "messages": user,
            "outputs": [{"text": "<think>\nhm\n</think>\n\nHello", "is_partial": False}],
        },
        {"id": "m", "template": "no-such.jinja", "messages": user},
    ]
    stdin = "".join(json.dumps(request) + "\n" for request in requests)
    result = chatcodec("batch", stdin=stdin)
    assert result.returncode == 0, result.stderr
    rendered, empty, parsed, missing = [json.loads(line) for line in result.stdout.splitlines()]
    assert rendered == {
        "id": "r",
        "rendered": load(CHECKPOINT).render(user, add_generation_prompt=True),
    }
    assert (empty["error"]["type"], empty["error"]["stage"]) == ("ValueError", "render")
    [output] = parsed["results"]
    assert output["message"]["content"] == "Hello"
    assert (
        missing["error"]["type"] == "UsageError" and "no-such.jinja" in missing["error"]["message"]
    )


def test_spans_and_openai_messages_on_the_example_checkpoint() -> None:
    conversation = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}]
    spans = chatcodec("render", str(CHECKPOINT), "--spans", stdin=json.dumps(conversation))
    assert spans.returncode == 0, spans.stderr
    report = json.loads(spans.stdout)
    assert [report["prompt"][a:b] for a, b in report["spans"]] == ["A<|im_end|>"]
    assert report["spans_from"] == "derived"
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    request = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, image]}]}
    refused = chatcodec("render", str(CHECKPOINT), "--openai", stdin=json.dumps(request))
    assert refused.returncode == 1 and refused.stdout == ""
    assert "RequestError: message 0 has a 'image_url' content block" in refused.stderr


def test_prepare_pins_strftime_now_as_render_does() -> None:
    # `parse --now` hands the moment to Codec.prepare, which renders the prompt with it
    dated = "{{- 'Today: ' + strftime_now('%d %b %Y') + '\\n' -}}"
    source = dated + (CHECKPOINT / "chat_template.jinja").read_text(encoding="utf-8")
    codec = Codec(source, eos_token="<|im_end|>")
    user = [{"role": "user", "content": "hi"}]
    turn = codec.prepare(user, now=0)
    assert turn.prompt == codec.render(user, add_generation_prompt=True, now=0)
    assert turn.prompt.startswith("Today: 01 Jan 1970\n")
    assert turn.parse("Hello").content == "Hello"
