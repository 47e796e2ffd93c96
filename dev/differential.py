"""chatcodec against llama.cpp, side by side, on any chat template (a developer tool).

    python dev/differential.py TEMPLATE.jinja|DIR ... [--oracle BINARY] [--show N] [--json FILE]

For each template it builds requests as the parse corpus does (no tools; tools with
``tool_choice`` auto, required, none; parallel calls on and off; thinking off; reasoning
format none; a history with an earlier call; a ``response_format``), and replies in the
template's own format: the assistant messages a model would write (plain text, a thought,
one call, parallel calls, text then a call, a JSON answer) rendered by the template itself,
cut from the conversation after the generation prompt. Mutations follow (trailing text, a
call to an undeclared tool, an unclosed call, cuts at every few characters parsed as partial
and as finished).

llama.cpp's side is ``../shared/tools/llamacpp-oracle`` (llama.cpp's own chat code behind
JSON lines; build it once with its ``build.sh``): its setup (generation prompt, extra stops,
handler) and its parse of every reply. chatcodec's side is ``chatcodec.batch``, the path
``chatcodec batch`` takes. Messages are compared with the corpus's own ``compare.py``.
The report lists, per template, the handler and how many replies differ, then the first
differences in full; the exit status is 1 when anything differs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from chatcodec import ChatCodecError, ChatTemplate
from chatcodec.batch import prepare_request
from chatcodec.template.compat import llama_compatible

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared"
DEFAULT_ORACLE = Path.home() / ".cache" / "chatcodec-oracle" / "chat_oracle"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER, SEARCH]
USER = {"role": "user", "content": "What's the weather in Paris?"}
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
}


def _call(name: str, arguments: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "id": f"call_{index:04d}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


PARIS = _call("get_weather", {"city": "Paris"}, 1)
LONDON = _call("get_weather", {"city": "London", "unit": "celsius"}, 2)
FIND = _call("search", {"query": 'rain, "Paris"', "limit": 3}, 3)
HISTORY = [
    USER,
    {"role": "assistant", "content": "", "tool_calls": [PARIS]},
    {"role": "tool", "tool_call_id": "call_0001", "content": '{"temperature": 18}'},
    {"role": "user", "content": "And in London?"},
]

# the assistant messages replies are rendered from: name -> (message, needs tools)
INTENTS: dict[str, tuple[dict[str, Any], bool]] = {
    "plain": ({"role": "assistant", "content": "It is 18 °C and sunny in Paris."}, False),
    "reasoning": (
        {
            "role": "assistant",
            "reasoning_content": "The user wants the weather.",
            "content": "It is sunny.",
        },
        False,
    ),
    "tool_single": ({"role": "assistant", "content": "", "tool_calls": [PARIS]}, True),
    "tool_parallel": (
        {"role": "assistant", "content": "", "tool_calls": [PARIS, LONDON, FIND]},
        True,
    ),
    "content_then_tool": (
        {"role": "assistant", "content": "Let me check.", "tool_calls": [FIND]},
        True,
    ),
    "reasoning_tool": (
        {
            "role": "assistant",
            "reasoning_content": "I should look it up.",
            "content": "",
            "tool_calls": [PARIS],
        },
        True,
    ),
    "json_answer": (
        {"role": "assistant", "content": '{"city": "Paris", "temperature": 18}'},
        False,
    ),
}

# option sets: name -> request fields
OPTION_SETS: dict[str, dict[str, Any]] = {
    "notools": {"tools": None},
    "auto-par0": {"tools": TOOLS, "parallel_tool_calls": False},
    "auto-par1": {"tools": TOOLS, "parallel_tool_calls": True},
    "required-par1": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
    "none": {"tools": TOOLS, "tool_choice": "none"},
    "auto-par1-think0": {"tools": TOOLS, "parallel_tool_calls": True, "enable_thinking": False},
    "auto-par1-rfnone": {"tools": TOOLS, "parallel_tool_calls": True, "reasoning_format": "none"},
    "history-par1": {"tools": TOOLS, "parallel_tool_calls": True, "messages": HISTORY},
    "json": {"tools": None, "json_schema": SCHEMA},
    "json-tools": {"tools": TOOLS, "parallel_tool_calls": True, "json_schema": SCHEMA},
    "json-think0": {"tools": None, "enable_thinking": False, "json_schema": SCHEMA},
    "json-rfnone": {"tools": None, "reasoning_format": "none", "json_schema": SCHEMA},
    "json-tools-think0-rfnone": {
        "tools": TOOLS,
        "enable_thinking": False,
        "reasoning_format": "none",
        "json_schema": SCHEMA,
    },
}


@dataclass
class Case:
    """One request and its replies, in the parse corpus's shape."""

    id: str
    template: Path
    request: dict[str, Any]
    replies: list[tuple[str, str]]  # (kind, text)
    outputs: list[dict[str, Any]] = field(default_factory=list)


# ------------------------------------------------------------------- replies


BOS, EOS = "<s>", "</s>"


def _render(template: ChatTemplate, messages: list[dict[str, Any]], **kw: Any) -> str | None:
    try:
        return template.render(messages, bos_token=BOS, eos_token=EOS, **kw)
    except ChatCodecError:
        return None


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _turn_end(template: ChatTemplate, messages: list[dict[str, Any]], tools: Any) -> str:
    """What the template writes after an assistant message's text (its end of turn)."""
    sentinel = "Zq7Sentinel"
    full = _render(template, [*messages, {"role": "assistant", "content": sentinel}], tools=tools)
    if full is None or sentinel not in full:
        return ""
    return full[full.rindex(sentinel) + len(sentinel) :]


def derive_replies(
    template: ChatTemplate, messages: list[dict[str, Any]], tools: Any
) -> Iterator[tuple[str, str]]:
    """(intent, reply) for each intent the template can render: the text the template puts
    after the generation prompt for that assistant message, its end of turn cut off."""
    prompt = _render(template, messages, tools=tools, add_generation_prompt=True)
    if prompt is None:
        return
    end = _turn_end(template, messages, tools)
    seen: set[str] = set()
    for intent, (message, needs_tools) in INTENTS.items():
        if needs_tools and not tools:
            continue
        full = _render_message(template, messages, message, tools)
        if full is None:
            continue
        reply = full[_common_prefix(prompt, full) :]
        for tail in (end, end.rstrip(), end.strip()):
            if tail and reply.endswith(tail):
                reply = reply[: -len(tail)]
                break
        if reply and reply not in seen:
            seen.add(reply)
            yield intent, reply


def _render_message(
    template: ChatTemplate, messages: list[dict[str, Any]], message: dict[str, Any], tools: Any
) -> str | None:
    """The conversation ending with ``message``; for calls, the first form that shows them:
    rendered as transformers or as llama.cpp renders, arguments as an object or as JSON text
    (as llama.cpp tries), content empty or null."""
    if "tool_calls" not in message:
        return _render(template, [*messages, message], tools=tools)
    name = message["tool_calls"][0]["function"]["name"]
    first = None
    for engine in (template, llama_compatible(template)):
        for form in (message, _text_arguments(message)):
            for content in (form["content"], None):
                full = _render(engine, [*messages, {**form, "content": content}], tools=tools)
                if full is not None and name in full[-300:]:
                    return full
                first = first or full
    return first


def _text_arguments(message: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
        for c in message["tool_calls"]
    ]
    return {**message, "tool_calls": calls}


# calls as models of the common families write them, whatever the template renders
WRITTEN_CALLS = (
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
)


ANSWER = '{"city": "Paris", "temperature": 18}'
# a response format's JSON as models write it, whatever the template renders
WRITTEN_JSON = (
    ANSWER,
    f"  {ANSWER}\n\n",
    f"```json\n{ANSWER}\n```",
    f"{ANSWER} and more text",
    f"<think>Let me think.</think>\n{ANSWER}",
    "It is 18 °C in Paris.",
    '[1, 2.5e3, "x", null, true]',
    "18",
)


def mutations(intent: str, reply: str) -> Iterator[tuple[str, str]]:
    yield intent, reply
    if ANSWER in reply:  # the JSON answer fenced, and with space around it
        yield f"{intent}+fenced", reply.replace(ANSWER, f"```json\n{ANSWER}\n```")
        yield f"{intent}+spaced", reply.replace(ANSWER, f" \n{ANSWER}\n ")
    yield f"{intent}+trailing", reply + "\nAnything else?"
    # a thought the model writes whether or not the template shows one
    yield f"{intent}+closed_thought", "Let me think.</think>" + reply
    yield f"{intent}+thought", "<think>Let me think.</think>\n\n" + reply
    if "get_weather" in reply:
        yield f"{intent}+unknown_tool", reply.replace("get_weather", "get_wheather")
        yield f"{intent}+unclosed", reply[: reply.rindex("Paris") + 5]
    for arguments in ('{"city": "Paris"}', '{"city":"Paris"}'):
        if arguments in reply:  # arguments written as a JSON string instead of an object
            yield f"{intent}+string_arguments", reply.replace(arguments, json.dumps(arguments))
            break


def cuts(reply: str, every: int) -> Iterator[int]:
    yield from range(every, len(reply), every)


def outputs_of(replies: Iterable[tuple[str, str]], every: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind, text in replies:
        out.append({"text": text, "is_partial": False, "kind": kind})
        out.append({"text": text, "is_partial": True, "kind": f"{kind}/partial"})
        for cut in cuts(text, every):
            for partial in (True, False):
                out.append({"text": text[:cut], "is_partial": partial, "kind": f"{kind}@{cut}"})
    return out


def build_cases(path: Path, every: int) -> list[Case]:
    source = path.read_text(encoding="utf-8")
    try:
        template = ChatTemplate(source)
    except ChatCodecError:
        return []
    cases = []
    for name, options in OPTION_SETS.items():
        messages = options.get("messages", [USER])
        tools = options.get("tools")
        replies = [
            m
            for intent, reply in derive_replies(template, messages, tools)
            for m in mutations(intent, reply)
        ]
        if tools:
            replies += [(f"written_call_{i}", call) for i, call in enumerate(WRITTEN_CALLS)]
        if "json_schema" in options:
            replies += [(f"written_json_{i}", text) for i, text in enumerate(WRITTEN_JSON)]
        if not replies:
            replies = [("plain", "It is sunny.")]
        request = {
            "template": str(path),
            "bos_token": BOS,
            "eos_token": EOS,
            "messages": messages,
            "tools": tools,
            "tool_choice": options.get("tool_choice", "auto"),
            "parallel_tool_calls": options.get("parallel_tool_calls", False),
            "enable_thinking": options.get("enable_thinking", True),
            "reasoning_format": options.get("reasoning_format", "deepseek"),
            "chat_template_kwargs": {},
            "add_generation_prompt": True,
        }
        if "json_schema" in options:
            request["json_schema"] = options["json_schema"]
        case = Case(f"{path.stem}__{name}", path, request, replies)
        case.outputs = outputs_of(replies, every)
        cases.append(case)
    return cases


# ------------------------------------------------------------------- both sides


def run_oracle(cases: Sequence[Case], binary: Path) -> list[dict[str, Any]]:
    """llama.cpp's setup and parses of every case (one oracle process for all)."""
    if not binary.exists():
        sys.exit(
            f"differential: no llama.cpp oracle at {binary}; build it with "
            f"bash {SHARED / 'tools' / 'llamacpp-oracle' / 'build.sh'}"
        )
    lines = []
    for case in cases:
        request = {**case.request, "id": case.id}
        request["outputs"] = [
            {"text": o["text"], "is_partial": o["is_partial"]} for o in case.outputs
        ]
        lines.append(json.dumps(request, ensure_ascii=False))
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [str(binary), os.path.join(tmp, "oracle.log")],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            check=False,
        )
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    by_id = {a.get("id"): a for a in answers}
    return [by_id.get(c.id, {"ok": False, "error": "the oracle crashed"}) for c in cases]


def run_chatcodec(case: Case) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """chatcodec's setup and parse of every output, as ``chatcodec batch`` runs them."""
    request = dict(case.request)
    request["template_source"] = case.template.read_text(encoding="utf-8")
    schema = request.pop("json_schema", None)
    if schema is not None:
        request["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        }
    try:
        turn = prepare_request(request)
    except ChatCodecError as exc:
        return {"error": str(exc)}, [{"error": str(exc)} for _ in case.outputs]
    c = turn.format.constraint
    setup = {
        "handler": turn.handler,
        "generation_prompt": turn.generation_prompt,
        # the sampler setup (the grammar's text is compared by dev/grammar_text.py)
        "grammar": c.grammar,
        "grammar_lazy": c.lazy,
        "grammar_triggers": [{"type": t.type, "value": t.value} for t in c.triggers],
        "preserved_tokens": list(c.preserved_tokens),
        "additional_stops": list(c.additional_stops),
    }
    results: list[dict[str, Any]] = []
    for output in case.outputs:
        try:
            message = turn.parse(output["text"], partial=output["is_partial"])
        except ChatCodecError as exc:
            results.append({"error": str(exc)})
        else:
            results.append({"message": message.to_dict()})
    return setup, results


# ------------------------------------------------------------------- comparing


def load_compare() -> ModuleType:
    path = SHARED / "oracle" / "parse" / "compare.py"
    spec = importlib.util.spec_from_file_location("oracle_compare", path)
    if spec is None or spec.loader is None:
        sys.exit(f"differential: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


UNLOADABLE = "(llama.cpp cannot load it)"
SETUP_FIELDS = (
    "generation_prompt",
    "grammar",
    "grammar_lazy",
    "grammar_triggers",
    "preserved_tokens",
    "additional_stops",
)


@dataclass
class Difference:
    case: str
    what: str
    detail: str


def _expected(answer: dict[str, Any], index: int) -> dict[str, Any]:
    result = answer["results"][index]
    if not result.get("ok"):
        return {"error": result.get("error", "")}
    msg = result["msg"]
    calls = [
        {k: v for k, v in call.items() if k != "id" or v} for call in msg.get("tool_calls", [])
    ]
    return {"expected": {**msg, "tool_calls": calls}}


def compare_case(
    case: Case, answer: dict[str, Any], compare: ModuleType
) -> tuple[str, list[Difference]]:
    setup, results = run_chatcodec(case)
    diffs: list[Difference] = []
    if not answer.get("ok"):
        if "template_caps" not in answer:
            # llama.cpp's lexer refused the template itself (docs/differences.md, 11)
            return UNLOADABLE, diffs
        if "error" not in setup:
            diffs.append(Difference(case.id, "setup", f"llama.cpp failed: {answer.get('error')}"))
        return answer.get("handler", "?"), diffs
    if "error" in setup:
        diffs.append(Difference(case.id, "setup", f"chatcodec failed: {setup['error']}"))
        return answer.get("handler", "?"), diffs
    params = answer["params"]
    params = {**params, "grammar": bool(params["grammar"])}
    for key in SETUP_FIELDS:
        if setup[key] != params[key]:
            diffs.append(
                Difference(case.id, key, f"chatcodec {setup[key]!r}, llama.cpp {params[key]!r}")
            )
    for index, output in enumerate(case.outputs):
        expected = _expected(answer, index)
        reason = compare.compare_output(expected, results[index])
        if reason:
            shown = json.dumps(output["text"], ensure_ascii=False)
            diffs.append(
                Difference(
                    case.id,
                    f"parse {output['kind']}{' (partial)' if output['is_partial'] else ''}",
                    f"reply {shown}\n    {reason}",
                )
            )
    return answer.get("handler", "?"), diffs


def templates_of(paths: Iterable[str]) -> list[Path]:
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        found += sorted(path.glob("*.jinja")) if path.is_dir() else [path]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("templates", nargs="+", help="template files or folders of .jinja files")
    parser.add_argument(
        "--oracle", type=Path, default=Path(os.environ.get("CHAT_ORACLE", DEFAULT_ORACLE))
    )
    parser.add_argument("--every", type=int, default=7, help="cut replies every N characters")
    parser.add_argument("--show", type=int, default=3, help="differences shown per template")
    parser.add_argument("--json", type=Path, help="write every difference to this file")
    args = parser.parse_args(argv)
    compare = load_compare()
    everything: list[Difference] = []
    rows = []
    for path in templates_of(args.templates):
        cases = build_cases(path, args.every)
        if not cases:
            rows.append((path.name, "(does not compile)", 0, 0))
            continue
        answers = run_oracle(cases, args.oracle)
        diffs: list[Difference] = []
        handler = "?"
        for case, answer in zip(cases, answers, strict=True):
            handler, found = compare_case(case, answer, compare)
            diffs += found
        rows.append((path.name, handler, sum(len(c.outputs) for c in cases), len(diffs)))
        everything += diffs
        for d in diffs[: args.show]:
            print(f"  {d.case}: {d.what}\n    {d.detail}", file=sys.stderr)
    width = max((len(r[0]) for r in rows), default=10)
    for name, handler, outputs, count in rows:
        print(f"{name:<{width}}  {handler:<22} {outputs:>6} outputs  {count:>5} differ")
    unloadable = sum(1 for r in rows if r[1] == UNLOADABLE)
    compared = [r for r in rows if r[1] != UNLOADABLE and r[2]]
    agree = sum(1 for r in compared if r[3] == 0)
    outputs = sum(r[2] for r in compared)
    print(
        f"\n{agree}/{len(compared)} templates agree with llama.cpp on every output "
        f"({outputs:,} outputs compared); {unloadable} that llama.cpp cannot load"
    )
    if args.json:
        args.json.write_text(
            json.dumps([d.__dict__ for d in everything], indent=1, ensure_ascii=False)
        )
    return 1 if everything else 0


if __name__ == "__main__":
    sys.exit(main())
