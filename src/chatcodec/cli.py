"""The ``chatcodec`` command: render | parse | inspect | batch.

Every subcommand is a thin driver around the library: it reads files or stdin, calls the
public API, and writes the result to stdout. Errors go to stderr as one line with exit
status 1 (2 for bad usage), so the command composes in shell pipelines.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from .errors import ChatCodecError, TemplateError

__all__ = ["main"]


class UsageError(Exception):
    """Bad input on the command line or in an input file (exit status 2)."""


# --- input helpers -------------------------------------------------------------------------


def _read_json(path: str | None, what: str) -> Any:
    if path is None or path == "-":
        text = sys.stdin.read()
        where = "stdin"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {what} from {path}: {exc.strerror}") from None
        where = path
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} in {where} is not valid JSON: {exc}") from None


def _parse_var(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise UsageError(f"--var takes key=value, got {item!r}")
    try:
        return key, json.loads(raw)  # true, 3, {"a": 1} ... keep their JSON types
    except json.JSONDecodeError:
        return key, raw  # anything else is a plain string


def _parse_now(raw: str) -> float | datetime:
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--now takes unix seconds or an ISO 8601 time with a zone, got {raw!r}"
        ) from None
    if moment.tzinfo is None:
        raise UsageError(f"--now needs a time zone (e.g. {raw}Z or {raw}+00:00)")
    return moment


def _load(source: str, template_name: str | None = None) -> Any:
    from .checkpoint import load

    return load(source, template_name=template_name)


# --- render --------------------------------------------------------------------------------


def _cmd_render(args: argparse.Namespace) -> int:
    codec = _load(args.source, args.template_name)
    payload = _read_json(args.messages, "messages")
    tools = documents = None
    if isinstance(payload, dict):  # a request body: {"messages": [...], "tools": [...], ...}
        messages = payload.get("messages")
        tools = payload.get("tools")
        documents = payload.get("documents")
    else:
        messages = payload
    if not isinstance(messages, list):
        raise UsageError(
            "messages must be a JSON list of messages, or an object with a 'messages' list"
        )
    if args.tools:
        tools = _read_json(args.tools, "tools")
    if args.documents:
        documents = _read_json(args.documents, "documents")
    context = dict(_parse_var(item) for item in args.var)
    now = _parse_now(args.now) if args.now is not None else None
    if args.openai:  # an OpenAI request's messages: convert them to what this template reads
        from .template import probe_capabilities, to_template_messages

        template = codec.template_for(tools, args.template_name)
        converted = to_template_messages(
            messages, probe_capabilities(template, codec.special_tokens), tools
        )
        messages, tools = converted.messages, converted.tools
    if args.spans:
        rendered = codec.render_with_spans(
            messages, tools, documents, args.add_generation_prompt, now=now, **context
        )
        spans = [[span.start, span.end] for span in rendered.spans]
        json.dump(
            {"prompt": rendered.text, "spans": spans, "spans_from": rendered.source}, sys.stdout
        )
        sys.stdout.write("\n")
        return 0
    prompt = codec.render(
        messages,
        tools,
        documents,
        add_generation_prompt=args.add_generation_prompt,
        continue_final_message=args.continue_final_message or False,
        now=now,
        **context,
    )
    if args.json:
        json.dump({"prompt": prompt}, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(prompt)  # the exact bytes: no newline added
    return 0


# --- inspect -------------------------------------------------------------------------------


def _inspect_report(codec: Any) -> dict[str, Any]:
    from .template.capabilities import probe_capabilities

    template = codec.template
    capabilities = probe_capabilities(template, codec.special_tokens)
    report: dict[str, Any] = {
        "origin": codec.origin,
        "templates": sorted(codec.sources) if codec.sources else None,
        "selected": codec.select(None),
        "special_tokens": codec.special_tokens,
        "capabilities": {
            field.name: getattr(capabilities, field.name)
            for field in dataclasses.fields(capabilities)
            if field.name != "variables"
        },
        "variables": sorted(template.variables),
    }
    describe = _reply_description(codec)
    if describe is not None:
        report["reply"] = describe
    return report


def _reply_description(codec: Any) -> Any:
    try:
        from .reply.cli import describe  # type: ignore[attr-defined]
    except ImportError:
        return None
    try:
        return describe(codec)
    except ChatCodecError as exc:
        return {"error": str(exc)}


def _cmd_inspect(args: argparse.Namespace) -> int:
    codec = _load(args.source, args.template_name)
    report = _inspect_report(codec)
    if args.json:
        json.dump(report, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
        return 0
    out = sys.stdout
    out.write(f"origin:         {report['origin']}\n")
    if report["templates"]:
        out.write(
            f"templates:      {', '.join(report['templates'])} (default: {report['selected']})\n"
        )
    tokens = report["special_tokens"] or {}
    out.write(
        "special tokens: " + (", ".join(f"{k}={v!r}" for k, v in tokens.items()) or "none") + "\n"
    )
    out.write("capabilities:\n")
    for key, value in report["capabilities"].items():
        out.write(f"  {key:<20} {'yes' if value is True else 'no' if value is False else value}\n")
    out.write(f"variables:      {', '.join(report['variables'])}\n")
    if "reply" in report:
        out.write("reply format:\n")
        text = json.dumps(report["reply"], ensure_ascii=False, indent=2)
        out.write("".join(f"  {line}\n" for line in text.splitlines()))
    return 0


# --- batch ---------------------------------------------------------------------------------


class _TemplateFiles:
    """Resolves a request's ``template`` file name, compiling each template once."""

    def __init__(self, directory: str | None) -> None:
        candidates = [directory] if directory else []
        candidates += [
            os.environ.get("CHATCODEC_TEMPLATES", ""),
            "chat_templates",
            "../shared/chat_templates",
        ]
        self.directories = [Path(d) for d in candidates if d]
        self._cache: dict[str, Any] = {}

    def source(self, name: str) -> str:
        for base in [Path("."), *self.directories]:
            path = base / name
            if path.is_file():
                return path.read_text(encoding="utf-8")
        tried = ", ".join(str(d) for d in self.directories)
        raise UsageError(f"template {name!r} not found (looked in ., {tried}; see --templates)")

    def template(self, name: str) -> Any:
        from .template import ChatTemplate

        if name not in self._cache:
            try:
                self._cache[name] = ChatTemplate(self.source(name), name=name)
            except TemplateError as exc:
                self._cache[name] = exc
        found = self._cache[name]
        if isinstance(found, TemplateError):
            raise found
        return found


def _render_request(request: dict[str, Any], files: _TemplateFiles) -> dict[str, Any]:
    result: dict[str, Any] = {"id": request.get("id")}
    try:
        if "chat_template" in request:
            from .template import ChatTemplate

            template = ChatTemplate(request["chat_template"])
        else:
            template = files.template(request["template"])
        result["rendered"] = template.render(
            request.get("messages"),  # type: ignore[arg-type]  # render validates it
            tools=request.get("tools"),
            documents=request.get("documents"),
            add_generation_prompt=bool(request.get("add_generation_prompt", False)),
            continue_final_message=request.get("continue_final_message", False),
            now=request.get("now_unix"),
            **(request.get("kwargs") or {}),
        )
    except TemplateError as exc:
        result["error"] = {"type": exc.kind, "stage": exc.stage, "message": str(exc)}
    return result


def _is_parse_request(request: dict[str, Any]) -> bool:
    return "outputs" in request or "llama_cpp" in request or "replies" in request


def _parse_request(request: dict[str, Any], files: _TemplateFiles) -> dict[str, Any]:
    from .reply.cli import batch_result

    if "template" in request and "template_source" not in request:
        request = {**request, "template_source": files.source(request["template"])}
    result: dict[str, Any] = batch_result(request)
    return result


class _Progress:
    """A one-line progress report on stderr, only when stderr is a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0

    def update(self, done: int, errors: int, final: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not final and now - self.last < 0.1):
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        end = "\n" if final else ""
        self.stream.write(f"\rbatch: {done} requests, {errors} with errors, {rate:,.0f}/s{end}")
        self.stream.flush()


def _requests(stream: TextIO) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, None, f"line {number} is not valid JSON: {exc}"
            continue
        if not isinstance(request, dict):
            yield number, None, f"line {number} is not a JSON object"
            continue
        yield number, request, ""


def _cmd_batch(args: argparse.Namespace) -> int:
    files = _TemplateFiles(args.templates)
    progress = _Progress(sys.stderr)
    done = errors = 0
    out = sys.stdout
    for _, request, problem in _requests(sys.stdin):
        if request is None:
            result: dict[str, Any] = {
                "id": None,
                "error": {"type": "UsageError", "message": problem},
            }
        else:
            try:
                if _is_parse_request(request):
                    result = _parse_request(request, files)
                else:
                    result = _render_request(request, files)
            except (UsageError, KeyError) as exc:
                message = str(exc) if isinstance(exc, UsageError) else f"missing field {exc}"
                result = {
                    "id": request.get("id"),
                    "error": {"type": "UsageError", "message": message},
                }
        done += 1
        errors += "error" in result
        out.write(json.dumps(result, ensure_ascii=False) + "\n")
        progress.update(done, errors)
    progress.update(done, errors, final=True)
    out.flush()
    return 0


# --- entry point ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chatcodec",
        description="Render prompts and parse replies in a checkpoint's own chat format.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"chatcodec {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    source_help = (
        "a checkpoint folder, tokenizer_config.json, .jinja file, GGUF file, or a Hugging Face "
        "repo id found in the local cache"
    )
    render = commands.add_parser("render", help="render a conversation to the exact prompt text")
    render.add_argument("source", help=source_help)
    render.add_argument(
        "messages", nargs="?", help="JSON file of messages or of a request body (default: stdin)"
    )
    render.add_argument("--tools", help="JSON file with the tools array")
    render.add_argument("--documents", help="JSON file with the documents array")
    render.add_argument("--add-generation-prompt", "-g", action="store_true")
    render.add_argument(
        "--continue-final-message",
        nargs="?",
        const=True,
        metavar="FIELD",
        help="leave the last message open (optionally naming the field, e.g. reasoning_content)",
    )
    render.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a template variable; VALUE is read as JSON when it parses (true, 3, ...)",
    )
    render.add_argument("--now", help="pin strftime_now: unix seconds or ISO 8601 with a zone")
    render.add_argument("--template-name", help="which named template of the checkpoint to use")
    render.add_argument(
        "--openai",
        action="store_true",
        help="the messages are an OpenAI request's: parse argument strings, fold tools into a "
        "preamble when the template cannot render them, ...",
    )
    render.add_argument("--json", action="store_true", help='print {"prompt": ...} as JSON')
    render.add_argument(
        "--spans", action="store_true", help="print the prompt and the assistant spans as JSON"
    )
    render.set_defaults(func=_cmd_render)

    inspect_ = commands.add_parser(
        "inspect", help="where the template came from and what it can do"
    )
    inspect_.add_argument("source", help=source_help)
    inspect_.add_argument("--template-name", help="which named template of the checkpoint to use")
    inspect_.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect_.set_defaults(func=_cmd_inspect)

    batch = commands.add_parser(
        "batch", help="JSON Lines requests on stdin (oracle schema) -> one JSON result per line"
    )
    batch.add_argument(
        "--templates", help="folder holding the templates the requests name (default: search)"
    )
    batch.set_defaults(func=_cmd_batch)

    try:
        from .reply.cli import register
    except ImportError:
        pass
    else:
        register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except UsageError as exc:
        print(f"chatcodec {args.command}: {exc}", file=sys.stderr)
        return 2
    except ChatCodecError as exc:
        print(f"chatcodec {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into head: not an error of ours
        return 0


if __name__ == "__main__":
    sys.exit(main())
