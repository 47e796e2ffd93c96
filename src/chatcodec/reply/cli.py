"""`chatcodec parse` and the per-request worker of `chatcodec batch` (the parse corpus schema)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..checkpoint import load
from ..codec import Codec
from ..errors import ChatCodecError
from .turn import Turn

__all__ = ["register", "batch_result", "prepare_request"]

_TEMPLATE_DIRS = ("chat_templates",)


def _template_text(request: Mapping[str, Any]) -> str:
    if isinstance(request.get("template_source"), str):
        return str(request["template_source"])
    name = str(request["template"])
    path = Path(name)
    if path.is_file():
        return path.read_text(encoding="utf-8")
    here = Path.cwd()
    for base in (here, *here.parents):
        for folder in ("shared", "holdout"):
            candidate = base / folder / "chat_templates" / name
            if candidate.is_file():
                return candidate.read_text(encoding="utf-8")
    raise ChatCodecError(f"template {name!r} not found (give a path or run beside shared/)")


@lru_cache(maxsize=256)
def _prepare_cached(key: str) -> Turn:
    request = json.loads(key)
    return _prepare(request)


@lru_cache(maxsize=64)
def _codec(source: str, bos_token: str, eos_token: str) -> Codec:
    # compiling a template costs far more than rendering it: requests of a corpus share it
    return Codec(source, bos_token=bos_token, eos_token=eos_token)


def _prepare(request: Mapping[str, Any]) -> Turn:
    codec = _codec(
        _template_text(request), request.get("bos_token") or "", request.get("eos_token") or ""
    )
    return codec.prepare(
        request.get("messages") or [],
        tools=request.get("tools"),
        tool_choice=request.get("tool_choice") or "auto",
        parallel_tool_calls=request.get("parallel_tool_calls"),
        enable_thinking=request.get("enable_thinking", True),
        reasoning_format=request.get("reasoning_format") or "deepseek",
        **(request.get("chat_template_kwargs") or {}),
    )


def prepare_request(request: Mapping[str, Any]) -> Turn:
    """The Turn of one corpus request (requests that differ only in replies share it)."""
    fields = (
        "template",
        "template_source",
        "bos_token",
        "eos_token",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "enable_thinking",
        "reasoning_format",
        "chat_template_kwargs",
    )
    key = json.dumps({k: request.get(k) for k in fields if k in request}, sort_keys=True)
    return _prepare_cached(key)


def batch_result(request: dict[str, Any]) -> dict[str, Any]:
    """One line of the parse corpus -> ``{"id", "results": [{"message"} | {"error"}, ...]}``."""
    outputs = request.get("outputs") or []
    try:
        turn = prepare_request(request)
    except ChatCodecError as exc:
        return {"id": request.get("id"), "results": [{"error": str(exc)} for _ in outputs]}
    results: list[dict[str, Any]] = []
    for output in outputs:
        try:
            message = turn.parse(output.get("text", ""), partial=bool(output.get("is_partial")))
        except ChatCodecError as exc:
            results.append({"error": str(exc)})
            continue
        results.append({"message": message.to_dict()})
    return {"id": request.get("id"), "results": results}


def register(subparsers: Any) -> None:
    """Add `chatcodec parse` to the CLI."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "parse",
        help="parse a model reply into an assistant message (as llama.cpp does)",
        description="Parse a model reply (a file or stdin) for a template and request options.",
    )
    p.add_argument(
        "template",
        help="a checkpoint folder, tokenizer_config.json, .jinja file, GGUF file, or a Hugging "
        "Face repo id found in the local cache",
    )
    p.add_argument("reply", nargs="?", default="-", help="the reply text file (default: stdin)")
    p.add_argument("--tools", help="a JSON file with the OpenAI tools array")
    p.add_argument("--messages", help="a JSON file with the conversation before the reply")
    p.add_argument("--tool-choice", default="auto", choices=("auto", "required", "none"))
    p.add_argument("--parallel", dest="parallel", action="store_true", default=None)
    p.add_argument("--no-parallel", dest="parallel", action="store_false")
    p.add_argument("--no-thinking", dest="thinking", action="store_false", default=True)
    p.add_argument("--reasoning-format", default="deepseek", choices=("deepseek", "auto", "none"))
    p.add_argument("--bos-token", help="override the checkpoint's bos_token")
    p.add_argument("--eos-token", help="override the checkpoint's eos_token")
    p.add_argument(
        "--continue",
        dest="continue_final",
        action="store_const",
        const="auto",
        default=None,
        help="continue the final message of --messages (its reasoning when it has no content, "
        "else its content); a final assistant message is continued by default, as "
        "llama-server does",
    )
    p.add_argument(
        "--no-continue",
        dest="continue_final",
        action="store_const",
        const="none",
        help="never continue a final assistant message",
    )
    p.add_argument(
        "--response-format",
        metavar="FILE",
        help='a JSON file with the OpenAI response_format ({"type": "json_schema", ...})',
    )
    p.add_argument("--partial", action="store_true", help="read the reply as a stream prefix")
    p.add_argument("--stream", action="store_true", help="print the deltas as JSON lines")
    p.add_argument("--chunk", type=int, default=1, help="characters per streamed chunk")
    p.set_defaults(func=_parse_command)


def _load_json(path: str | None) -> Any:
    if path is None:
        return None
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _parse_command(args: argparse.Namespace) -> int:
    try:
        reply = sys.stdin.read() if args.reply == "-" else Path(args.reply).read_text("utf-8")
        messages = _load_json(args.messages) or [{"role": "user", "content": ""}]
        codec = load(args.template)  # a checkpoint folder, GGUF, .jinja, or cached repo id
        if args.bos_token is not None or args.eos_token is not None:
            tokens = dict(codec.special_tokens)
            if args.bos_token is not None:
                tokens["bos_token"] = args.bos_token
            if args.eos_token is not None:
                tokens["eos_token"] = args.eos_token
            codec = Codec(codec.sources or codec.template.source, special_tokens=tokens)
        turn = codec.prepare(
            messages,
            tools=_load_json(args.tools),
            tool_choice=args.tool_choice,
            parallel_tool_calls=args.parallel,
            enable_thinking=args.thinking,
            reasoning_format=args.reasoning_format,
            continue_final_message=(
                False if args.continue_final == "none" else args.continue_final
            ),
            response_format=_load_json(args.response_format),
        )
        if args.stream:
            stream = turn.stream()
            step = max(1, args.chunk)
            for i in range(0, len(reply), step):
                for delta in stream.feed(reply[i : i + step]):
                    print(json.dumps(delta.to_openai(), ensure_ascii=False))
            last, message = stream.finish(partial=args.partial)
            for delta in last:
                print(json.dumps(delta.to_openai(), ensure_ascii=False))
        else:
            message = turn.parse(reply, partial=args.partial)
    except (OSError, ValueError) as exc:
        print(f"chatcodec parse: {exc}", file=sys.stderr)
        return 2
    except ChatCodecError as exc:
        print(f"chatcodec parse: {exc}", file=sys.stderr)
        return 1
    out = message.to_openai()
    if message.dropped:
        out["dropped"] = message.to_dict()["dropped"]
    print(json.dumps(out, ensure_ascii=False))
    return 0


def describe(codec: Codec) -> dict[str, Any]:
    """How replies to this checkpoint's default template are read: the llama.cpp handler and,
    for the auto parser, the markers derived by diffing probe renders (``chatcodec inspect``)."""
    import dataclasses

    from .auto import analysis_for
    from .select import handler_for

    template = codec.template
    handler = handler_for(template.source)
    out: dict[str, Any] = {"handler": handler}
    if handler != "autoparser":
        return out | _family_summary(codec)
    try:
        analysis = analysis_for(template.source, template.special_tokens)
    except ChatCodecError as exc:
        out["error"] = str(exc)
        return out

    def kept(section: Any) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(section).items() if v not in ("", [], False)}

    out.update(
        {
            "supports_tool_calls": analysis.supports_tool_calls,
            "supports_parallel_tool_calls": analysis.supports_parallel_tool_calls,
            "reasoning": kept(analysis.reasoning),
            "content": kept(analysis.content),
            "tools": kept(analysis.tools),
            "assistant_start": analysis.assistant_start,
            "user_start": analysis.user_start,
            "preserved_tokens": list(analysis.preserved_tokens),
            "additional_stops": list(analysis.additional_stops),
        }
    )
    return out


_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _family_summary(codec: Codec) -> dict[str, Any]:
    """The markers a specialised family reads, from a turn prepared for a one-tool request."""
    try:
        turn = codec.prepare([{"role": "user", "content": "Hello"}], tools=[_PROBE_TOOL])
    except ChatCodecError as exc:
        return {"error": str(exc)}
    fmt = turn.format
    out: dict[str, Any] = {"generation_prompt": turn.generation_prompt, "stop": list(turn.stop)}
    if fmt.reasoning is not None:
        out["reasoning"] = {"start": fmt.reasoning.start, "ends": list(fmt.reasoning.stops)}
    if fmt.content_start or fmt.content_end:
        out["content"] = {"start": fmt.content_start, "end": fmt.content_end}
    if fmt.calls is not None:
        out["tool_calls"] = {
            "openers": list(fmt.calls.openers),
            "call_end": fmt.calls.commit,
            "parallel": fmt.calls.next is not None,
        }
    if fmt.flow is not None:
        out["messages"] = {
            "states": sorted(fmt.flow.states),
            "openers": list(fmt.flow.openers),
        }
    out["trailing_text"] = "fails the parse" if fmt.end_anchor else "dropped"
    return out
