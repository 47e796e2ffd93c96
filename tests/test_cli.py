"""The chatcodec command, run as a user runs it: a real subprocess, files and pipes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
        (["serve", "{ckpt}", "--backend", "notaurl"], "", 2, "--backend: not an http:// or"),
        (["serve", "{ckpt}", "--backend", "ftp://h/v1"], "", 2, "--backend: not an http:// or"),
        (["serve", "{ckpt}", "--backend", "http://[::1/v1"], "", 2, "--backend: not an http://"),
        (["serve", "{ckpt}", "--backend", "http://h/v1", "--port", "70000"], "", 2, "at most"),
        (["serve", "{ckpt}", "--backend", "http://h/v1", "--port", "0"], "", 2, "at least 1"),
        (["serve", "{ckpt}", "--backend", "http://h/v1", "--api-key", " "], "", 2, "not be empty"),
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
    grammar = options("grammar")
    assert shared | {"--tools", "--var", "--now", "--no-thinking", "--tool-choice"} <= grammar
    assert {"--response-format", "--reasoning-format", "--messages"} <= grammar & parse
    for command in ("render", "parse", "grammar", "inspect"):
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
    assert result.returncode == 2, result.stderr  # the broken line is a usage error
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == len(chosen) + 1
    for case, line in zip(chosen, lines[:-1], strict=True):
        assert line["id"] == case["id"]
        if "error" in case:
            assert line["error"]["type"] == case["error"]["type"]
        else:
            assert line["rendered"] == case["expected"]
    assert lines[-1]["error"]["type"] == "UsageError"
    # no progress bar when stderr is not a terminal: only the count of unusable lines
    assert result.stderr == (
        f"chatcodec batch: 1 UsageError of {len(chosen) + 1} requests could not be run "
        "(see their result lines)\n"
    )


def test_batch_names_a_missing_template() -> None:
    request = {
        "id": "x",
        "template": "no-such.jinja",
        "messages": [{"role": "user", "content": "x"}],
    }
    result = chatcodec("batch", stdin=json.dumps(request) + "\n")
    assert result.returncode == 2
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
    template = "chat_template.jinja"  # a file name inside --templates
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
    result = chatcodec("batch", "--templates", str(CHECKPOINT), stdin=stdin)
    assert result.returncode == 2, result.stderr  # the missing template is a usage error
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


# --- robustness: no traceback, one line, the right status, a batch that goes on -----------

HI = [{"role": "user", "content": "Hi"}]


def _one_error_line(result: subprocess.CompletedProcess[str], status: int, says: str) -> None:
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["render", "{ckpt}", "{bad}"], "messages in {bad} is not UTF-8 text"),
        (["render", "{ckpt}", "{ok}", "--tools", "{bad}"], "tools in {bad} is not UTF-8 text"),
        (["render", "{ckpt}", "{ok}", "--documents", "{bad}"], "documents in {bad} is not UTF-8"),
        (["parse", "{ckpt}", "{bad}"], "the reply in {bad} is not UTF-8 text"),
        (["parse", "{ckpt}", "--messages", "{bad}"], "messages in {bad} is not UTF-8 text"),
        (["parse", "{ckpt}", "--response-format", "{bad}"], "response_format in {bad} is not"),
    ],
)
def test_a_file_that_is_not_utf8_is_one_usage_line(
    tmp_path: Path, args: list[str], says: str
) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes('[{"role": "user", "content": "caf\xe9"}]'.encode("latin-1"))
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(HI), encoding="utf-8")
    names = {"{ckpt}": str(CHECKPOINT), "{bad}": str(bad), "{ok}": str(ok)}
    argv = [names.get(arg, arg) for arg in args]
    result = chatcodec(*argv, stdin="Hello")
    _one_error_line(result, 2, says.replace("{bad}", str(bad)))
    assert result.stdout == ""


def test_an_integer_too_long_for_python_is_one_usage_line(tmp_path: Path) -> None:
    # Python converts at most 4,300 digits: json.loads raises a plain ValueError (it was an
    # "internal error" line); in --var the text stays a plain string
    huge = "1" * 5000
    messages = tmp_path / "huge.json"
    messages.write_text(f'[{{"role": "user", "content": {huge}}}]', encoding="utf-8")
    result = chatcodec("render", str(CHECKPOINT), str(messages))
    _one_error_line(result, 2, f"messages in {messages} cannot be read: Exceeds the limit")
    as_var = chatcodec("render", str(CHECKPOINT), "--var", f"x={huge}", stdin=json.dumps(HI))
    assert as_var.returncode == 0, as_var.stderr
    assert as_var.stdout == load(CHECKPOINT).render(HI)  # the template never reads x
    assert "never reads 'x'" in as_var.stderr and "internal error" not in as_var.stderr


def test_stdin_that_is_not_utf8_is_one_usage_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "chatcodec", "render", str(CHECKPOINT)],
        input=b'[{"role": "user", "content": "\xff"}]',
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 2
    assert (
        result.stderr.decode()
        .strip()
        .endswith("messages in stdin is not UTF-8 text (invalid start byte at byte 30)")
    )


@pytest.mark.parametrize(
    ("args", "files", "status", "says"),
    [
        # messages of the wrong shape: the library's own error, status 1
        (["parse", "--messages", "{a}"], {"a": [1, 2]}, 1, "TemplateArgumentError: message 0"),
        (["render", "{a}"], {"a": [1, 2]}, 1, "TemplateArgumentError: message 0 is an int"),
        (["render", "{a}", "--openai"], {"a": ["x"]}, 1, "message 0 is a str"),
        (["parse", "--messages", "{a}"], {"a": {"messages": "x"}}, 2, "must be a JSON list"),
        (["parse", "--response-format", "{a}"], {"a": [1]}, 1, "RequestError: response_format"),
        (["parse", "--tools", "{a}"], {"a": {"type": "function"}}, 1, "tools must be a list"),
        (["render", "{b}", "--tools", "{a}"], {"a": [1], "b": HI}, 1, "Tools should either be"),
        # JSON too deep to read, options that collide with the command's own
        (["render", "{a}"], {"a": "[" * 100_000}, 2, "nests too deeply to read"),
        (["render", "{b}", "--var", "messages=[]"], {"b": HI}, 2, "--var cannot set 'messages'"),
        (["render", "{b}", "--var", "self=1"], {"b": HI}, 2, "--var cannot set 'self'"),
        (["parse", "--var", "tool_choice=1"], {}, 2, "--var cannot set 'tool_choice'"),
    ],
)
def test_a_request_file_of_the_wrong_shape_is_one_line(
    tmp_path: Path, args: list[str], files: dict[str, Any], status: int, says: str
) -> None:
    names = {}
    for key, content in files.items():
        path = tmp_path / f"{key}.json"
        text = content if isinstance(content, str) else json.dumps(content)
        path.write_text(text, encoding="utf-8")
        names[f"{{{key}}}"] = str(path)
    command, *rest = args
    result = chatcodec(command, str(CHECKPOINT), *[names.get(a, a) for a in rest], stdin="Hi")
    _one_error_line(result, status, says)
    assert result.stderr.startswith(f"chatcodec {command}: {CHECKPOINT}: ")


@pytest.mark.parametrize("chunk", ["0", "-1", "two"])
def test_a_chunk_size_below_one_is_a_usage_error(chunk: str) -> None:
    result = chatcodec("parse", str(CHECKPOINT), "--stream", "--chunk", chunk, stdin="Hello")
    assert result.returncode == 2
    assert "argument --chunk" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_prompt_the_output_cannot_encode_is_one_line_and_json_escapes_it(
    tmp_path: Path,
) -> None:
    messages = tmp_path / "m.json"
    messages.write_text('[{"role": "user", "content": "\\ud800"}]', encoding="utf-8")
    raw = chatcodec("render", str(CHECKPOINT), str(messages))
    _one_error_line(raw, 2, "use --json")
    as_json = chatcodec("render", str(CHECKPOINT), str(messages), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert "\\ud800" in as_json.stdout
    assert json.loads(as_json.stdout)["prompt"] == load(CHECKPOINT).render(
        [{"role": "user", "content": "\ud800"}]
    )


def _batch(stdin: bytes, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    result = subprocess.run(
        [sys.executable, "-m", "chatcodec", "batch", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    lines = [json.loads(line) for line in result.stdout.decode("utf-8").splitlines()]
    return result.returncode, lines, result.stderr.decode("utf-8")


def test_one_bad_batch_line_is_one_error_result_and_the_batch_goes_on() -> None:
    good = {"id": "good", "template": "chat_template.jinja", "messages": HI}
    parse = {**good, "id": "parse", "outputs": [{"text": "Hello", "is_partial": False}]}
    bad_requests = [
        {**good, "id": "kwargs", "kwargs": [1]},
        {**good, "id": "clash", "kwargs": {"messages": []}},
        {**good, "id": "name", "template": 5},
        {**good, "id": "messages", "messages": [1, 2]},
        {**good, "id": "tools", "tools": "get_weather"},
        {**good, "id": "deep", "messages": [{"role": "user", "content": [[[[[[[]]]]]]]}]},
        {**parse, "id": "outputs", "outputs": 5},
        {**parse, "id": "output", "outputs": [{"text": 3}]},
        {**parse, "id": "ckw", "chat_template_kwargs": {"tools": []}},
        {**parse, "id": "p-messages", "messages": "x"},
        {**parse, "id": "p-format", "tool_choice": [1]},
    ]
    lines = [json.dumps(good).encode()]
    for request in bad_requests:
        lines += [json.dumps(request).encode(), json.dumps(good).encode()]
    lines += [b"{not json", b"[1, 2]", b'{"id": "latin", "x": "caf\xe9"}', b"[" * 100_000]
    lines += [json.dumps(parse).encode()]
    status, results, stderr = _batch(b"\n".join(lines) + b"\n", "--templates", str(CHECKPOINT))
    assert "Traceback" not in stderr
    assert status == 2  # some lines could not be run at all
    assert len(results) == 1 + 2 * len(bad_requests) + 5
    expected = {"id": "good", "rendered": load(CHECKPOINT).render(HI)}
    assert results[0] == expected and all(r == expected for r in results[2:-5:2])
    by_id = {r["id"]: r for r in results[1:-5:2]}
    for usage in ("kwargs", "clash", "name", "outputs", "output", "ckw"):
        assert by_id[usage]["error"]["type"] == "UsageError", by_id[usage]
    # the request reached the library: the render oracle's error form, with the kind
    assert by_id["messages"]["error"] == {
        "type": "AttributeError",
        "stage": "render",
        "message": "message 0 is an int, not a mapping of fields",
    }
    assert by_id["tools"]["error"]["type"] == "ValueError"
    assert "rendered" in by_id["deep"] or by_id["deep"]["error"]["stage"] == "render"
    # the parse corpus' error form: one error per output
    assert by_id["p-messages"] == {
        "id": "p-messages",
        "results": [{"error": "messages must be a list of message mappings, not a str"}],
    }
    assert list(by_id["p-format"]["results"][0]) == ["error"]
    not_json, not_object, latin, deep = results[-5:-1]
    assert not_json["error"]["message"].startswith(f"line {len(lines) - 4} is not valid JSON")
    assert not_object["error"]["message"] == f"line {len(lines) - 3} is not a JSON object"
    assert latin["error"]["message"].startswith(f"line {len(lines) - 2} is not UTF-8 text")
    assert deep["error"]["message"] == f"line {len(lines) - 1} nests too deeply to read"
    assert results[-1]["results"][0]["message"]["content"] == "Hello"
    unusable = 6 + 4  # the UsageError requests above and the four unreadable lines
    assert stderr == (
        f"chatcodec batch: {unusable} UsageError of {len(results)} requests could not be run "
        "(see their result lines)\n"
    )


def test_a_batch_template_stays_inside_the_template_folder(tmp_path: Path) -> None:
    folder = tmp_path / "templates"
    (folder / "sub").mkdir(parents=True)
    source = (CHECKPOINT / "chat_template.jinja").read_text(encoding="utf-8")
    (folder / "sub" / "inside.jinja").write_text(source, encoding="utf-8")
    secret = tmp_path / "secret.jinja"
    secret.write_text("the secret", encoding="utf-8")
    (folder / "link.jinja").symlink_to(secret)
    names = [
        "sub/inside.jinja",  # inside: rendered
        str(secret),  # absolute
        "../secret.jinja",  # a climb
        "sub/../../secret.jinja",  # a climb through a folder that is there
        "link.jinja",  # a link out of the folder
        str(CHECKPOINT / "chat_template.jinja"),  # absolute, even to a real template
    ]
    requests = [{"id": name, "template": name, "messages": HI} for name in names]
    stdin = "".join(json.dumps(r) + "\n" for r in requests).encode()
    status, results, stderr = _batch(stdin, "--templates", str(folder))
    assert status == 2 and "Traceback" not in stderr
    inside, *refused = results
    assert inside == {"id": "sub/inside.jinja", "rendered": load(CHECKPOINT).render(HI)}
    for result in refused:
        assert result["error"]["type"] == "UsageError"
        assert "the secret" not in json.dumps(result)
    assert "absolute paths and '..' are refused" in refused[0]["error"]["message"]
    assert "links outside its folder" in refused[3]["error"]["message"]


def test_an_internal_error_is_one_line_and_does_not_stop_a_batch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a stand-in for a bug of chatcodec's: the command reports it in one line, never a traceback
    from chatcodec import batch, cli

    def broken(request: Any, files: Any = None) -> dict[str, Any]:
        if request["id"] == "boom":
            raise AttributeError("'NoneType' object has no attribute 'x'")
        return {"id": request["id"], "rendered": ""}

    monkeypatch.setattr(batch, "batch_result", broken)
    stdin = b'{"id": "boom"}\n{"id": "fine"}\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    assert cli.main(["batch"]) == 1
    out, err = capsys.readouterr()
    boom, fine = [json.loads(line) for line in out.splitlines()]
    assert boom["error"]["type"] == "InternalError"
    assert "AttributeError: 'NoneType' object has no attribute 'x'" in boom["error"]["message"]
    assert fine == {"id": "fine", "rendered": ""}
    assert (
        err
        == "chatcodec batch: 1 InternalError of 2 requests could not be run (see their result lines)\n"
    )

    monkeypatch.setattr(Codec, "render", lambda *a, **k: {}["missing"])
    messages = json.dumps(HI)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(messages.encode())))
    assert cli.main(["render", str(CHECKPOINT)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"chatcodec render: {CHECKPOINT}: internal error (a bug in chatcodec: please report it): "
        "KeyError: 'missing'\n"
    )


# a template llama.cpp reads as Qwen3-Coder (the markers in its leading comment)
QWEN3_CODER = (
    "{#- <tool_call> <function= <parameter= -#}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def _grammar_files(tmp_path: Path) -> tuple[Path, Path]:
    template = tmp_path / "qwen3-coder.jinja"
    template.write_text(QWEN3_CODER, encoding="utf-8")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(WEATHER), encoding="utf-8")
    return template, tools


@pytest.mark.parametrize(
    ("fmt", "export"),
    [
        ("gbnf", lambda g: g.gbnf),
        ("lark", lambda g: g.to_lark()),
        ("structural-tag", lambda g: g.to_structural_tag()),
        ("llama-server", lambda g: g.llama_server_fields()),
        ("vllm", lambda g: g.vllm_fields()),
        ("sglang", lambda g: g.sglang_fields()),
    ],
)
def test_grammar_prints_the_request_grammar_in_each_format(
    tmp_path: Path, fmt: str, export: Any
) -> None:
    template, tools = _grammar_files(tmp_path)
    codec = Codec(QWEN3_CODER)
    for choice in ("auto", "required"):
        result = chatcodec(
            "grammar", str(template), "--tools", str(tools), "--tool-choice", choice,
            "--format", fmt,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        grammar = codec.prepare([{"role": "user", "content": ""}], WEATHER, tool_choice=choice)
        assert grammar.grammar is not None
        expected = export(grammar.grammar)
        got = result.stdout if isinstance(expected, str) else json.loads(result.stdout)
        assert got == expected


def test_grammar_reads_tools_from_stdin_and_takes_the_request_options(tmp_path: Path) -> None:
    template, _ = _grammar_files(tmp_path)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    response_format = tmp_path / "rf.json"
    response_format.write_text(
        json.dumps({"type": "json_schema", "json_schema": {"schema": schema}}), encoding="utf-8"
    )
    codec = Codec(QWEN3_CODER)
    hi = [{"role": "user", "content": ""}]
    parallel = chatcodec(
        "grammar", str(template), "--tools", "-", "--tool-choice", "get_weather",
        "--parallel-tool-calls", stdin=json.dumps(WEATHER),
    )  # fmt: skip
    assert parallel.returncode == 0, parallel.stderr
    named = {"type": "function", "function": {"name": "get_weather"}}
    turn = codec.prepare(hi, WEATHER, tool_choice=named, parallel_tool_calls=True)
    assert turn.grammar is not None and parallel.stdout == turn.grammar.gbnf
    json_reply = chatcodec(
        "grammar", str(template), "--response-format", str(response_format), "--format", "lark"
    )
    assert json_reply.returncode == 0, json_reply.stderr
    turn = codec.prepare(hi, response_format=json.loads(response_format.read_text()))
    assert turn.grammar is not None and json_reply.stdout == turn.grammar.to_lark()
    special = chatcodec(
        "grammar", str(template), "--tools", "-", "--format", "lark",
        "--special-token", "<tool_call>", "--special-token", "</tool_call>",
        stdin=json.dumps(WEATHER),
    )  # fmt: skip
    assert special.returncode == 0, special.stderr
    turn = codec.prepare(hi, WEATHER)
    assert turn.grammar is not None
    assert special.stdout == turn.grammar.to_lark(["<tool_call>", "</tool_call>"])
    assert "<tool_call>" in special.stdout


def test_grammar_without_one_is_one_line_and_status_1(tmp_path: Path) -> None:
    template, _ = _grammar_files(tmp_path)
    result = chatcodec("grammar", str(template))  # no tools, no response format
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"chatcodec grammar: {template}: llama.cpp sets no grammar for this request\n"
    )
    bad = chatcodec("grammar", str(template), "--format", "yaml")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_inspect_reports_the_constraint_of_tools_and_a_response_format(tmp_path: Path) -> None:
    template, _ = _grammar_files(tmp_path)
    result = chatcodec("inspect", str(template), "--json")
    assert result.returncode == 0, result.stderr
    constraints = json.loads(result.stdout)["constraints"]
    preserved = ["<tool_call>", "</tool_call>"]
    assert constraints == {
        "tools auto": {
            "grammar": True,
            "lazy": True,
            "triggers": [
                {"type": "word", "value": "<tool_call>"},
                {"type": "word", "value": "<function=get_weather>"},
            ],
            "preserved_tokens": preserved,
            "additional_stops": [],
        },
        "tools required": {
            "grammar": True,
            "lazy": False,
            "triggers": [],
            "preserved_tokens": preserved,
            "additional_stops": [],
        },
        "response_format": {
            "grammar": True,
            "lazy": False,
            "triggers": [],
            "preserved_tokens": preserved,
            "additional_stops": [],
        },
    }
    text = chatcodec("inspect", str(template))
    assert text.returncode == 0, text.stderr
    assert (
        "  tools auto:       lazy grammar, triggers: word '<tool_call>', word "
        "'<function=get_weather>'; preserved tokens: <tool_call>, </tool_call>\n"
    ) in text.stdout
    assert "  tools required:   grammar; preserved tokens:" in text.stdout
