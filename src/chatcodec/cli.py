"""The ``chatcodec`` command: render | encode | parse | grammar | inspect | batch | check-data |
serve.

Every subcommand is a thin driver around the library: it reads files or stdin, calls the
public API, and writes the result to stdout. The subcommands share their spellings, built
once as argparse parent parsers: ``CHECKPOINT`` first, then ``--template-name``,
``--bos-token``/``--eos-token``, and for the two that render a request ``--tools``,
``--var key=value``, ``--now``, ``--no-thinking``. Errors go to stderr as one line naming
the subcommand and the file, with exit status 1 (2 for bad usage), so the command composes
in shell pipelines.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import urllib.parse
import warnings
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .errors import ChatCodecError, UnusedVariableWarning

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .codec import Codec
    from .recipe import CodecRecipe

__all__ = ["main"]


class UsageError(Exception):
    """Bad input on the command line or in an input file (exit status 2); internal to the
    command, never raised by the library."""


# --- input helpers -------------------------------------------------------------------------


def _read_text(path: str | None, what: str) -> tuple[str, str]:
    """(text, where it came from) of a file, or of stdin for ``None`` / ``-``."""
    where = "stdin" if path is None or path == "-" else path
    try:
        data = sys.stdin.buffer.read() if where == "stdin" else Path(where).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} from {where}: {exc.strerror}") from None
    try:
        return data.decode("utf-8"), where
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{what} in {where} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


def _read_json(path: str | None, what: str) -> Any:
    text, where = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} in {where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{what} in {where} nests too deeply to read") from None
    except ValueError as exc:  # an integer longer than Python converts (4,300 digits)
        raise UsageError(f"{what} in {where} cannot be read: {exc}") from None


def _read_request(path: str | None) -> dict[str, Any]:
    """A conversation file: a JSON list of messages, or a request body ``{"messages": [...],
    "tools": [...], "documents": [...]}``; ``tools`` and ``documents`` may be absent."""
    payload = _read_json(path, "messages")
    request = payload if isinstance(payload, dict) else {"messages": payload}
    if not isinstance(request.get("messages"), list):
        raise UsageError(
            "messages must be a JSON list of messages, or an object with a 'messages' list"
        )
    return request


def _parse_var(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise UsageError(f"--var takes key=value, got {item!r}")
    try:
        return key, json.loads(raw)  # true, 3, {"a": 1} ... keep their JSON types
    except (ValueError, RecursionError):  # not JSON, or an integer too long to convert
        return key, raw  # anything else is a plain string


def _parse_now(raw: str | None) -> float | datetime | None:
    if raw is None:
        return None
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


# what each command passes by name itself: a --var of that name would collide with it
_OWN_KEYWORDS = {
    "render": frozenset(
        {"self", "messages", "tools", "documents", "add_generation_prompt"}
        | {"continue_final_message", "now", "template_name"}
    ),
    "parse": frozenset(
        {"self", "messages", "tools", "tool_choice", "parallel_tool_calls", "reasoning_format"}
        | {"continue_final_message", "response_format", "now", "tool_call_id"}
    ),
}
_OWN_KEYWORDS["grammar"] = _OWN_KEYWORDS["parse"]
_OWN_KEYWORDS["encode"] = _OWN_KEYWORDS["render"] | {
    "mask_end_marker",
    "mask_reasoning",
    "tokenizer",
}
# (checkdata.OWN_KEYWORDS, not imported here: that would load jinja for every command)
_OWN_KEYWORDS["check-data"] = _OWN_KEYWORDS["parse"] | {
    "documents",
    "id",
    "policy",
    "add_generation_prompt",
    "template_name",
    "codec",
}
_OWN_KEYWORDS["batch"] = _OWN_KEYWORDS["encode"]  # (batch --checkpoint encodes)


def _variables(args: argparse.Namespace) -> dict[str, Any]:
    """The template variables of ``--var`` and ``--no-thinking``."""
    variables = dict(_parse_var(item) for item in args.var)
    clashes = sorted(variables.keys() & _OWN_KEYWORDS[args.command])
    if clashes:
        raise UsageError(
            f"--var cannot set {clashes[0]!r}: it is one of {args.command}'s own options"
        )
    if not args.thinking:
        variables["enable_thinking"] = False
    return variables


def _load(args: argparse.Namespace) -> Codec:
    """The checkpoint of ``CHECKPOINT`` and ``--template-name``, with the special tokens of
    ``--bos-token`` / ``--eos-token`` in place of its own."""
    return _recipe(args).build()


def _recipe(args: argparse.Namespace) -> CodecRecipe:
    from .recipe import CodecRecipe

    return CodecRecipe(args.checkpoint, args.template_name, args.bos_token, args.eos_token)


def _print_json(value: Any, indent: int | None = None) -> None:
    sys.stdout.write(_json_line(value, indent))


def _json_line(value: Any, indent: int | None = None) -> str:
    """``batch.json_line`` for stdout's encoding."""
    from .batch import json_line

    return json_line(value, _charset(sys.stdout), indent)


def _charset(stream: TextIO) -> str:
    return getattr(stream, "encoding", None) or "utf-8"


# --- render --------------------------------------------------------------------------------


def _cmd_render(args: argparse.Namespace) -> int:
    request = _read_request(args.messages)
    messages = request["messages"]
    tools = _read_json(args.tools, "tools") if args.tools else request.get("tools")
    documents = (
        _read_json(args.documents, "documents") if args.documents else request.get("documents")
    )
    context = _variables(args)
    now = _parse_now(args.now)
    codec = _load(args)
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
        _print_json({"prompt": rendered.text, "spans": spans, "spans_from": rendered.source})
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
        _print_json({"prompt": prompt})
    else:
        try:
            sys.stdout.write(prompt)  # the exact bytes: no newline added
        except UnicodeEncodeError as exc:
            raise UsageError(
                f"the prompt holds {exc.object[exc.start : exc.end]!r}, which "
                f"{exc.encoding} cannot write (a lone surrogate?): use --json"
            ) from None
    return 0


# --- encode --------------------------------------------------------------------------------


def _cmd_encode(args: argparse.Namespace) -> int:
    request = _read_request(args.messages)
    tools = _read_json(args.tools, "tools") if args.tools else request.get("tools")
    documents = (
        _read_json(args.documents, "documents") if args.documents else request.get("documents")
    )
    context = _variables(args)
    now = _parse_now(args.now)
    codec = _load(args)
    encoding = codec.encode(
        request["messages"],
        tools,
        documents,
        args.add_generation_prompt,
        mask_end_marker=args.end_marker,
        mask_reasoning=args.reasoning,
        tokenizer=args.tokenizer,
        now=now,
        **context,
    )
    row = encoding.to_dict(text=args.text)
    if args.offsets:
        row["offsets"] = [list(pair) for pair in encoding.offsets]
    _print_json(row)
    return 0


# --- parse ---------------------------------------------------------------------------------


def _cmd_parse(args: argparse.Namespace) -> int:
    reply, _ = _read_text(args.reply, "the reply")
    request = _read_request(args.messages) if args.messages else {}
    messages = request.get("messages") or [{"role": "user", "content": ""}]
    tools = _read_json(args.tools, "tools") if args.tools else request.get("tools")
    response_format = (
        _read_json(args.response_format, "response_format") if args.response_format else None
    )
    context = _variables(args)
    now = _parse_now(args.now)
    continuation: bool | str | None = args.continue_final_message
    codec = _load(args)
    turn = codec.prepare(
        messages,
        tools=tools,
        tool_choice=_tool_choice(args.tool_choice),
        parallel_tool_calls=args.parallel,
        enable_thinking=context.pop("enable_thinking", True),
        reasoning_format=args.reasoning_format,
        continue_final_message="auto" if continuation is True else continuation,
        response_format=response_format,
        now=now,
        **context,
    )
    if args.stream:
        stream = turn.stream()
        step = args.chunk
        for i in range(0, len(reply), step):
            for delta in stream.feed(reply[i : i + step]):
                _print_json(delta.to_openai())
        last, message = stream.finish(partial=args.partial)
        for delta in last:
            _print_json(delta.to_openai())
    else:
        message = turn.parse(reply, partial=args.partial)
    out = message.to_openai()
    if message.dropped:
        out["dropped"] = message.to_dict()["dropped"]
    _print_json(out)
    return 0


# --- grammar -------------------------------------------------------------------------------

_GRAMMAR_FORMATS = ("gbnf", "lark", "structural-tag", "llama-server", "vllm", "sglang")


def _cmd_grammar(args: argparse.Namespace) -> int:
    request = _read_request(args.messages) if args.messages else {}
    messages = request.get("messages") or [{"role": "user", "content": ""}]
    tools = _read_json(args.tools, "tools") if args.tools else request.get("tools")
    response_format = (
        _read_json(args.response_format, "response_format") if args.response_format else None
    )
    context = _variables(args)
    now = _parse_now(args.now)
    codec = _load(args)
    turn = codec.prepare(
        messages,
        tools=tools,
        tool_choice=_tool_choice(args.tool_choice),
        parallel_tool_calls=args.parallel,
        enable_thinking=context.pop("enable_thinking", True),
        reasoning_format=args.reasoning_format,
        response_format=response_format,
        now=now,
        **context,
    )
    grammar = turn.grammar
    if grammar is None:
        print(
            f"chatcodec grammar: {args.checkpoint}: llama.cpp sets no grammar for this request",
            file=sys.stderr,
        )
        return 1
    if args.format == "gbnf":
        sys.stdout.write(grammar.gbnf)
    elif args.format == "lark":
        sys.stdout.write(grammar.to_lark(args.special_token))
    elif args.format == "structural-tag":
        _print_json(grammar.to_structural_tag(), indent=2)
    elif args.format == "llama-server":
        _print_json(grammar.llama_server_fields(), indent=2)
    elif args.format == "vllm":
        _print_json(grammar.vllm_fields(), indent=2)
    else:
        _print_json(grammar.sglang_fields(), indent=2)
    return 0


# --- inspect -------------------------------------------------------------------------------


def _inspect_report(codec: Codec) -> dict[str, Any]:
    from .template.capabilities import probe_capabilities

    template = codec.template
    capabilities = probe_capabilities(template, codec.special_tokens)
    report: dict[str, Any] = {
        "origin": codec.origin,
        "templates": sorted(codec.sources) if codec.sources else None,
        "selected": codec.select(None),
        "special_tokens": codec.special_tokens,
        "capabilities": {
            field.name: _plain(getattr(capabilities, field.name))
            for field in dataclasses.fields(capabilities)
            if field.name != "variables"
        },
        "variables": sorted(template.variables),
    }
    try:
        report["reply"] = _reply_format(codec)
    except ChatCodecError as exc:
        report["reply"] = {"error": str(exc)}
    report["constraints"] = _constraints(codec)
    return report


_PROBE_RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}


def _constraints(codec: Codec) -> dict[str, Any]:
    """What llama.cpp sets up to constrain a reply (grammar or not, lazy, triggers, preserved
    tokens, extra stops) for one tool under ``auto`` and ``required``, and a response format."""
    out: dict[str, Any] = {}
    for name, options in (
        ("tools auto", {"tools": [_PROBE_TOOL]}),
        ("tools required", {"tools": [_PROBE_TOOL], "tool_choice": "required"}),
        ("response_format", {"response_format": _PROBE_RESPONSE_FORMAT}),
    ):
        try:
            turn = codec.prepare([{"role": "user", "content": "Hello"}], **options)
        except ChatCodecError as exc:
            out[name] = {"error": str(exc)}
            continue
        c = turn.format.constraint
        out[name] = {
            "grammar": c.grammar,
            "lazy": c.lazy,
            "triggers": [{"type": t.type, "value": t.value} for t in c.triggers],
            "preserved_tokens": list(c.preserved_tokens),
            "additional_stops": list(c.additional_stops),
        }
    return out


def _plain(value: Any) -> Any:
    return sorted(value) if isinstance(value, (set, frozenset)) else value


def _reply_format(codec: Codec) -> dict[str, Any]:
    """How replies to the default template are read: the llama.cpp handler and, for the auto
    parser, the markers derived by diffing probe renders."""
    from .reply.auto import analysis_for
    from .reply.select import handler_for

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
    from .reply.description import Content

    try:
        turn = codec.prepare([{"role": "user", "content": "Hello"}], tools=[_PROBE_TOOL])
    except ChatCodecError as exc:
        return {"error": str(exc)}
    fmt = turn.format
    out: dict[str, Any] = {"generation_prompt": turn.generation_prompt, "stop": list(turn.stop)}
    if fmt.reasoning is not None:
        out["reasoning"] = {"start": fmt.reasoning.start, "ends": list(fmt.reasoning.stops)}
    content = fmt.find(Content)
    if content is not None and (content.open or content.close):
        out["content"] = {"start": content.open, "end": content.close}
    if fmt.calls is not None:
        out["tool_calls"] = {
            "openers": list(fmt.calls.openers),
            "call_end": commit if isinstance(commit := fmt.calls.commit, str) else commit.close,
            "parallel": fmt.calls.next is not None,
        }
    if fmt.flow is not None:
        out["messages"] = {
            "states": sorted(fmt.flow.states),
            "openers": list(fmt.flow.openers),
        }
    out["trailing_text"] = "fails the parse" if fmt.anchored else "dropped"
    return out


def _cmd_inspect(args: argparse.Namespace) -> int:
    report = _inspect_report(_load(args))
    if args.json:
        _print_json(report, indent=2)
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
        shown = "yes" if value is True else "no" if value is False else value
        if isinstance(value, list):
            shown = ", ".join(value) or "none"
        out.write(f"  {key:<20} {shown}\n")
    out.write(f"variables:      {', '.join(report['variables'])}\n")
    out.write("reply format:\n")
    text = json.dumps(report["reply"], ensure_ascii=False, indent=2)
    out.write("".join(f"  {line}\n" for line in text.splitlines()))
    out.write("constraints:\n")
    for name, c in report["constraints"].items():
        out.write(f"  {name + ':':<17} {_constraint_line(c)}\n")
    return 0


def _constraint_line(c: dict[str, Any]) -> str:
    if "error" in c:
        return f"error: {c['error']}"
    if not c["grammar"]:
        line = "no grammar"
    else:
        line = "lazy grammar" if c["lazy"] else "grammar"
        if c["triggers"]:
            shown = ", ".join(f"{t['type']} {t['value']!r}" for t in c["triggers"])
            line += f", triggers: {shown}"
    if c["preserved_tokens"]:
        line += f"; preserved tokens: {', '.join(c['preserved_tokens'])}"
    if c["additional_stops"]:
        line += f"; extra stops: {', '.join(map(repr, c['additional_stops']))}"
    return line


# --- batch ---------------------------------------------------------------------------------


class _Progress:
    """Progress on stderr, only when stderr is a terminal: tqdm's bar when the ``data``
    extra is installed, else a one-line count. ``total`` is None when unknown (stdin)."""

    def __init__(self, stream: TextIO, what: str, total: int | None = None) -> None:
        self.stream = stream
        self.what = what
        self.enabled = stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0
        self.bar: Any = None
        if self.enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, file=stream, unit=" " + what, dynamic_ncols=True)

    def update(self, done: int, errors: int, final: bool = False) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            self.bar.set_postfix_str(f"{errors} with errors", refresh=False)
            if final:
                self.bar.close()
            return
        now = time.monotonic()
        if not final and now - self.last < 0.1:
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        end = "\n" if final else ""
        line = f"\r{self.what}: {done}, {errors} with errors, {rate:,.0f}/s{end}"
        self.stream.write(line)
        self.stream.flush()


def _inputs(args: argparse.Namespace) -> tuple[list[str], int | None]:
    """The input files (stdin for none) and how many records they hold, when a progress bar
    will show it (files only: counting reads them once more)."""
    from .datafiles import count_records

    paths: list[str] = args.inputs or ["-"]
    if paths.count("-") > 1:
        raise UsageError("stdin (-) can be read only once")
    total = None
    if sys.stderr.isatty() and "-" not in paths:
        total = count_records(paths)
    return paths, total


def _output(path: str | None) -> TextIO:
    if path is None or path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")  # closed by _cmd_batch
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


# the options of batch that only encoding reads (with their defaults)
_ENCODE_OPTIONS: dict[str, Any] = {
    "template_name": None,
    "bos_token": None,
    "eos_token": None,
    "tokenizer": None,
    "var": [],
    "now": None,
    "thinking": True,
    "add_generation_prompt": False,
    "end_marker": True,
    "reasoning": True,
    "text": False,
    "offsets": False,
}


def _batch_results(
    args: argparse.Namespace, records: Any, charset: str | None
) -> Iterator[tuple[str | None, Any]]:
    """The results of ``chatcodec batch``, each as (its error type or None, itself): render
    and parse requests' result dicts, or with ``--checkpoint`` the encoded rows' (dataset
    rows), as their JSON lines already written when ``charset`` is given."""
    from .batch import run_batch, run_encode_batch
    from .data import DatasetEncoder

    if args.checkpoint is None:
        given = [name for name, default in _ENCODE_OPTIONS.items() if vars(args)[name] != default]
        if given:
            option = "--" + given[0].replace("_", "-")
            raise UsageError(f"{option} is an option of encoding: it takes --checkpoint")
        return _tagged(run_batch(records, args.templates, args.jobs))
    if args.templates is not None:
        raise UsageError("--templates names the templates of requests: --checkpoint has its own")
    options = _variables(args)
    if args.now is not None:
        options["now"] = _parse_now(args.now)
    encoder = DatasetEncoder(
        args.checkpoint,
        template_name=args.template_name,
        tokenizer=args.tokenizer,
        bos_token=args.bos_token,
        eos_token=args.eos_token,
        text=args.text,
        offsets=args.offsets,
        add_generation_prompt=args.add_generation_prompt,
        mask_end_marker=args.end_marker,
        mask_reasoning=args.reasoning,
        **options,
    )
    _ = encoder.codec  # a checkpoint that cannot be loaded fails once, here
    if charset is not None:
        return run_encode_batch(records, encoder, args.jobs, charset)
    return _tagged(run_encode_batch(records, encoder, args.jobs))


def _tagged(results: Iterator[dict[str, Any]]) -> Iterator[tuple[str | None, Any]]:
    return ((result.get("error", {}).get("type"), result) for result in results)


class _JsonLines:
    """Result lines written as JSON Lines to a file or stdout: a result, or its line."""

    def __init__(self, path: str | None) -> None:
        self.out = _output(path)
        self.charset = _charset(self.out)

    def write(self, result: dict[str, Any] | str) -> None:
        from .batch import json_line

        self.out.write(result if isinstance(result, str) else json_line(result, self.charset))

    def close(self) -> None:
        self.out.flush()
        if self.out is not sys.stdout:
            self.out.close()


def _batch_output(args: argparse.Namespace) -> Any:
    """Where the batch's results go: JSON Lines, or Parquet for an encoded dataset."""
    from .datafiles import EncodedParquet, is_parquet

    if args.output is None or not is_parquet(args.output):
        return _JsonLines(args.output)
    if args.checkpoint is None:
        raise UsageError("a Parquet output holds encoded rows: it takes --checkpoint")
    try:
        return EncodedParquet(args.output, text=args.text, offsets=args.offsets)
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc}") from None


def _cmd_batch(args: argparse.Namespace) -> int:
    from .datafiles import is_parquet, read_records

    paths, total = _inputs(args)
    encoding = args.checkpoint is not None
    what = "conversations" if encoding else "requests"
    # the workers write the JSON lines of encoded rows, in the output's charset
    charset = None
    if args.output is None or args.output == "-":
        charset = _charset(sys.stdout)
    elif not is_parquet(args.output):
        charset = "utf-8"  # (_output's)
    # (a dataset row's columns of JSON text are decoded by its encoder, once)
    results = _batch_results(args, read_records(paths, decode=not encoding), charset)
    out = _batch_output(args)
    progress = _Progress(sys.stderr, what, total)
    done = errors = 0
    # the result lines that are no answer: UsageError, InternalError (every error when encoding)
    unusable: Counter[str] = Counter()
    try:
        for kind, result in results:
            done += 1
            errors += kind is not None
            if kind in ("UsageError", "InternalError") or (encoding and kind is not None):
                unusable[kind] += 1
            out.write(result)
            progress.update(done, errors)
    except BrokenPipeError:
        raise
    except OSError as exc:  # an input file that cannot be opened or read
        raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
    finally:
        progress.update(done, errors, final=True)
        out.close()
    if not unusable:
        return 0
    counts = ", ".join(f"{count} {kind}" for kind, count in sorted(unusable.items()))
    failed = "encoded" if encoding else "run"
    print(
        f"chatcodec batch: {counts} of {done} {what} could not be {failed} (see their result "
        "lines)",
        file=sys.stderr,
    )
    return 1 if unusable["InternalError"] else 2


# --- check-data ----------------------------------------------------------------------------


def _cmd_check_data(args: argparse.Namespace) -> int:
    from .checkdata import ConversationCheck, DataReport, check_item, setup_checker
    from .datafiles import read_records
    from .workers import ordered_map

    recipe = _recipe(args)
    recipe.build()  # a checkpoint that cannot be loaded fails once, here
    options: dict[str, Any] = {
        **_variables(args),
        "reasoning_format": args.reasoning_format,
        "policy": args.policy,
    }
    if args.now is not None:
        options["now"] = _parse_now(args.now)
    paths, total = _inputs(args)
    items = (
        (number, record, problem) for number, (record, problem) in enumerate(read_records(paths))
    )
    progress = _Progress(sys.stderr, "conversations", total)
    report = DataReport()
    failed: list[ConversationCheck] = []
    try:
        for check in ordered_map(
            check_item, items, args.jobs, setup=setup_checker, setup_args=(recipe, options)
        ):
            report.add(check)
            if args.json:
                sys.stdout.write(_json_line(check.to_dict()))
            elif not check.ok and len(failed) < args.show:
                failed.append(check)
            progress.update(
                sum(report.conversations.values()), sum(report.failed_conversations.values())
            )
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
    finally:
        progress.update(
            sum(report.conversations.values()), sum(report.failed_conversations.values()), True
        )
    if args.json:
        _print_json({"summary": report.to_dict()})
    else:
        _print_check_report(report, failed)
    return 0 if report.ok else 1


def _print_check_report(report: Any, failed: list[Any]) -> None:
    from .checkdata import REASONS

    rows = [("template", "conversations", "failing", "turns", "read back", "reasons")]
    for name, counts in report.to_dict().items():
        turns = counts["turns"]
        share = f"{counts['good_turns']} ({counts['good_turns'] / turns:.0%})" if turns else "-"
        reasons = ", ".join(f"{code} {n}" for code, n in counts["reasons"].items())
        unrendered = f"not rendered {counts['unrendered']}" if counts["unrendered"] else ""
        rows.append(
            (
                name,
                str(counts["conversations"]),
                str(counts["failed_conversations"]),
                str(turns),
                share,
                "; ".join(x for x in (reasons, unrendered) if x) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True))
            + "  "
            + row[5]
        )
    for check in failed:
        if check.error:  # a line that could not be read has no id: its error names the line
            label = "" if check.id is None else f"conversation {check.id}: "
            print(f"\n{label}{check.error}")
        for turn in check.turns:
            if not turn.ok:
                print(f"\nconversation {check.id}, message {turn.index}: {', '.join(turn.reasons)}")
                print(f"  {turn.detail}")
    used = sorted({code for counts in report.reasons.values() for code in counts})
    if used:
        print("\nreasons:")
        for code in used:
            print(f"  {code}: {REASONS[code]}")
    bad = sum(report.failed_conversations.values())
    total = sum(report.conversations.values())
    print(f"\n{bad} of {total} conversations have a turn that does not read back")


# --- serve ---------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    from .serve.main import serve  # the server extra, imported only by this command

    if args.backend is None and not args.checkpoint.endswith(".gguf"):
        raise UsageError(
            "serve needs a MODEL.gguf for the in-process engine, or --backend URL for a remote one"
        )
    if args.backend_kind == "sglang" and args.max_tokens_default is None:
        raise UsageError(
            "--backend-kind sglang needs --max-tokens-default N: SGLang's /v1/completions "
            "gives 16 tokens to a request that names none and takes no null"
        )
    return serve(args, _load)


def _add_serve(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    checkpoint: argparse.ArgumentParser,
) -> None:
    serve = commands.add_parser(
        "serve",
        parents=[checkpoint],
        help="an OpenAI-compatible chat server over a raw completion engine",
        description="Serve POST /v1/chat/completions, GET /v1/models and GET /health for one "
        "model: chatcodec renders each request's prompt and reads the engine's text back. "
        "The engine is llama.cpp in this process (CHECKPOINT a .gguf file, extra [llama]) or "
        "a server speaking OpenAI's /v1/completions (--backend).",
    )
    serve.add_argument(
        "--backend",
        metavar="URL",
        type=_http_url,
        help="the engine's OpenAI root, e.g. http://127.0.0.1:8080/v1",
    )
    serve.add_argument(
        "--backend-kind",
        choices=("llama", "llama-cpp-python", "vllm", "sglang", "none"),
        default="none",
        help="how a grammar is sent to the backend (none: requests that need one are refused)",
    )
    serve.add_argument("--backend-model", help="the model name sent to the backend")
    serve.add_argument(
        "--max-tokens-default",
        type=_positive_int,
        metavar="N",
        help="the max_tokens of a request that gives none, on either engine (default: until "
        "the context is full; required with --backend-kind sglang)",
    )
    serve.add_argument(
        "--backend-no-stream",
        action="store_true",
        help="ask the backend for whole completions instead of a stream",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8000)
    serve.add_argument("--model-name", help="the model id clients name (default: CHECKPOINT)")
    serve.add_argument("--api-key", type=_nonempty, help="the bearer token clients must send")
    serve.add_argument(
        "--max-body", type=_positive_int, default=8 * 1024 * 1024, help="largest body, bytes"
    )
    serve.add_argument(
        "--timeout",
        type=_positive_float,
        default=600.0,
        help="the longest a request's setup (its render and grammar) or the engine's next piece "
        "of text (a queued request's wait included) may take, seconds; past it a request fails "
        "with 504",
    )
    serve.add_argument(
        "--body-timeout",
        type=_positive_float,
        default=30.0,
        help="the longest a request's body may take to arrive, seconds; past it the request "
        "fails with 408 and its connection is closed",
    )
    serve.add_argument(
        "--policy",
        choices=("guaranteed", "reference"),
        default="guaranteed",
        help="how replies are read and constrained when the request does not say (its policy "
        "field): guaranteed (prose is content, a required call is a call; docs/decoding.md) or "
        "reference (llama.cpp exactly)",
    )
    serve.add_argument(
        "--reasoning-field",
        choices=("reasoning_content", "reasoning", "both"),
        default="reasoning_content",
    )
    serve.add_argument("--n-ctx", type=_positive_int, default=4096, help="in-process context")
    serve.add_argument(
        "--n-threads", type=_positive_int, help="in-process decoding threads (llama.cpp's default)"
    )
    serve.add_argument(
        "--log-level", choices=("critical", "error", "warning", "info", "debug"), default="info"
    )
    serve.set_defaults(func=_cmd_serve)


# --- the parser ----------------------------------------------------------------------------

_CHECKPOINT_HELP = (
    "a checkpoint folder, tokenizer_config.json, .jinja file, GGUF file, or a Hugging Face "
    "repo id found in the local cache"
)


def _checkpoint_options() -> argparse.ArgumentParser:
    """What render, parse and inspect share: the checkpoint and its template and tokens."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("checkpoint", metavar="CHECKPOINT", help=_CHECKPOINT_HELP)
    shared.add_argument(
        "--template-name", help="which named template of the checkpoint to use (e.g. tool_use)"
    )
    shared.add_argument("--bos-token", help="use this bos_token instead of the checkpoint's")
    shared.add_argument("--eos-token", help="use this eos_token instead of the checkpoint's")
    return shared


def _request_options() -> argparse.ArgumentParser:
    """What render and parse share: the parts of the request that shape the prompt."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--tools", metavar="FILE", help="JSON file with the OpenAI tools array")
    shared.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a template variable; VALUE is read as JSON when it parses (true, 3, ...)",
    )
    shared.add_argument(
        "--now", help="pin strftime_now: unix seconds or ISO 8601 with a zone (2025-03-05T09:07Z)"
    )
    shared.add_argument(
        "--no-thinking",
        dest="thinking",
        action="store_false",
        help="enable_thinking=false (templates that do not read it ignore it)",
    )
    return shared


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _nonempty(raw: str) -> str:
    if not raw.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return raw


def _port(raw: str) -> int:
    value = _positive_int(raw)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, not {value}")
    return value


def _http_url(raw: str) -> str:
    try:
        parts = urllib.parse.urlsplit(raw)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed [IPv6 address
        usable = False
    if not usable:
        raise argparse.ArgumentTypeError(
            f"not an http:// or https:// URL with a host: {raw!r} (the engine's OpenAI root, "
            "e.g. http://127.0.0.1:8080/v1)"
        )
    return raw


def _positive_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {raw}")
    return value


def _tool_choice(value: str) -> str | dict[str, Any]:
    """``--tool-choice``: llama.cpp's three values, or a tool's name (OpenAI's named form)."""
    if value in ("auto", "required", "none"):
        return value
    return {"type": "function", "function": {"name": value}}


def _add_render(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    checkpoint: argparse.ArgumentParser,
    request: argparse.ArgumentParser,
) -> None:
    render = commands.add_parser(
        "render",
        parents=[checkpoint, request],
        help="render a conversation to the exact prompt text",
        description="Render a conversation with the checkpoint's template, as transformers' "
        "apply_chat_template(..., tokenize=False) does.",
    )
    render.add_argument(
        "messages",
        nargs="?",
        metavar="MESSAGES",
        help="JSON file of messages or of a request body with messages, tools, documents "
        "(default: stdin)",
    )
    render.add_argument("--documents", metavar="FILE", help="JSON file with the documents array")
    render.add_argument("--add-generation-prompt", "-g", action="store_true")
    render.add_argument(
        "--continue-final-message",
        nargs="?",
        const=True,
        metavar="FIELD",
        help="leave the last message open (optionally naming the field, e.g. reasoning_content)",
    )
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


def _add_encode(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    checkpoint: argparse.ArgumentParser,
    request: argparse.ArgumentParser,
) -> None:
    encode = commands.add_parser(
        "encode",
        parents=[checkpoint, request],
        help="a conversation's token ids and assistant mask, as JSON",
        description="Tokenize the rendered conversation with the checkpoint's tokenizer, as "
        "transformers' apply_chat_template(..., tokenize=True, return_dict=True, "
        "return_assistant_tokens_mask=True) does, with a mask of the assistant's tokens for "
        "any template; print {input_ids, attention_mask, assistant_masks} as JSON.",
    )
    encode.add_argument(
        "messages",
        nargs="?",
        metavar="MESSAGES",
        help="JSON file of messages or of a request body with messages, tools, documents "
        "(default: stdin)",
    )
    encode.add_argument("--documents", metavar="FILE", help="JSON file with the documents array")
    _add_encoding_options(encode)
    encode.set_defaults(func=_cmd_encode)


def _add_encoding_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The options of an encoding that the request options lack (encode's, batch's)."""
    parser.add_argument("--add-generation-prompt", "-g", action="store_true")
    parser.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenize with this folder, tokenizer.json or .gguf instead of the checkpoint's",
    )
    parser.add_argument(
        "--no-end-marker",
        dest="end_marker",
        action="store_false",
        help="leave the end-of-turn marker out of the mask",
    )
    parser.add_argument(
        "--no-reasoning",
        dest="reasoning",
        action="store_false",
        help="leave the thought out of the mask",
    )
    parser.add_argument("--text", action="store_true", help="add the rendered text")
    parser.add_argument(
        "--offsets", action="store_true", help="add each token's [start, end) in the text"
    )


def _add_parse(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    checkpoint: argparse.ArgumentParser,
    request: argparse.ArgumentParser,
) -> None:
    parse = commands.add_parser(
        "parse",
        parents=[checkpoint, request],
        help="parse a model reply into an assistant message (as llama.cpp does)",
        description="Parse a model reply for the checkpoint and request options, as "
        "llama.cpp's chat parsers do; prints the OpenAI assistant message as JSON.",
    )
    parse.add_argument(
        "reply", nargs="?", metavar="REPLY", help="the reply text file (default: stdin)"
    )
    parse.add_argument(
        "--messages",
        metavar="FILE",
        help="the conversation before the reply: a JSON list of messages or a request body",
    )
    parse.add_argument(
        "--tool-choice",
        default="auto",
        metavar="auto|required|none|NAME",
        help="llama.cpp's tool_choice, or the name of the one tool the reply must call",
    )
    parse.add_argument("--parallel", dest="parallel", action="store_true", default=None)
    parse.add_argument("--no-parallel", dest="parallel", action="store_false")
    parse.add_argument(
        "--reasoning-format",
        default="deepseek",
        choices=("deepseek", "auto", "none", "deepseek-legacy"),
    )
    parse.add_argument(
        "--continue-final-message",
        nargs="?",
        const=True,
        default=None,
        metavar="FIELD",
        help="the reply continues the final message of --messages (its reasoning when it has "
        "no content, else its content; or the FIELD named). A final assistant message is "
        "continued by default, as llama-server does",
    )
    parse.add_argument(
        "--no-continue-final-message",
        dest="continue_final_message",
        action="store_const",
        const=False,
        help="never continue a final assistant message",
    )
    parse.add_argument(
        "--response-format",
        metavar="FILE",
        help='a JSON file with the OpenAI response_format ({"type": "json_schema", ...})',
    )
    parse.add_argument("--partial", action="store_true", help="read the reply as a stream prefix")
    parse.add_argument("--stream", action="store_true", help="print the deltas as JSON lines")
    parse.add_argument(
        "--chunk", type=_positive_int, default=1, help="characters per streamed chunk (>= 1)"
    )
    parse.set_defaults(func=_cmd_parse)


def _add_grammar(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    checkpoint: argparse.ArgumentParser,
    request: argparse.ArgumentParser,
) -> None:
    grammar = commands.add_parser(
        "grammar",
        parents=[checkpoint, request],
        help="print the grammar that forces a valid reply, for llama.cpp or another engine",
        description="Print the grammar llama.cpp would sample a reply to this request under "
        "(GBNF), or the same constraint for another engine: llguidance's Lark, xgrammar's "
        "structural tag, or the request fields of llama.cpp's server, vLLM or SGLang. Exit "
        "status 1 when llama.cpp sets no grammar for the request.",
    )
    grammar.add_argument(
        "--messages",
        metavar="FILE",
        help="the conversation: a JSON list of messages or a request body (default: one user "
        "message; - for stdin)",
    )
    grammar.add_argument(
        "--tool-choice",
        default="auto",
        metavar="auto|required|none|NAME",
        help="llama.cpp's tool_choice, or the name of the one tool the reply must call",
    )
    grammar.add_argument(
        "--parallel-tool-calls", "--parallel", dest="parallel", action="store_true", default=None
    )
    grammar.add_argument(
        "--no-parallel-tool-calls", "--no-parallel", dest="parallel", action="store_false"
    )
    grammar.add_argument(
        "--reasoning-format",
        default="deepseek",
        choices=("deepseek", "auto", "none", "deepseek-legacy"),
    )
    grammar.add_argument(
        "--response-format",
        metavar="FILE",
        help='a JSON file with the OpenAI response_format ({"type": "json_schema", ...})',
    )
    grammar.add_argument("--format", choices=_GRAMMAR_FORMATS, default="gbnf")
    grammar.add_argument(
        "--special-token",
        action="append",
        default=[],
        metavar="TOKEN",
        help="with --format lark: a token the engine's tokenizer keeps special (written "
        "<token>, as llguidance names it); repeat for each",
    )
    grammar.set_defaults(func=_cmd_grammar)


def _jobs(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"takes a number of processes (0: one per core), not {raw!r}"
        )
    return value


def _add_batch(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batch = commands.add_parser(
        "batch",
        help="requests or a dataset (JSON Lines or Parquet) -> one JSON result per line",
        description="Run render and parse requests (the oracle corpora's schemas), one JSON "
        "result line per request, in input order; or, with --checkpoint, encode a dataset: "
        "each line a conversation (messages, and tools, documents, chat_template_kwargs, id "
        "when it has them), each result its id, input_ids, attention_mask and "
        "assistant_masks, as `chatcodec encode` gives them. A line that cannot be run gives "
        "an error line at its place and the batch goes on; the count of such lines is "
        "reported on stderr at the end, with exit status 2 (1 when one hit a bug of "
        "chatcodec's). When encoding, every error line counts: a conversation the template "
        "refuses has no tokens.",
    )
    batch.add_argument(
        "inputs",
        nargs="*",
        metavar="FILE",
        help="JSON Lines files, or Parquet files (.parquet, with the data extra); - or none: stdin",
    )
    batch.add_argument(
        "--templates",
        metavar="DIR",
        help="folder holding the templates the requests name (default: search)",
    )
    batch.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="worker processes (default 1; 0: one per core); results keep the input order",
    )
    batch.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the result lines to FILE (default: stdout); with --checkpoint, a name "
        "ending in .parquet writes Parquet (data extra)",
    )
    encoding = batch.add_argument_group(
        "encoding a dataset", "token ids and assistant masks, as `chatcodec encode` gives them"
    )
    encoding.add_argument(
        "--checkpoint",
        metavar="CHECKPOINT",
        help="encode each line with this checkpoint (a folder with tokenizer.json, a GGUF "
        "file, or a Hugging Face repo id found in the local cache)",
    )
    encoding.add_argument(
        "--template-name", help="which named template of the checkpoint to use (e.g. tool_use)"
    )
    encoding.add_argument("--bos-token", help="use this bos_token instead of the checkpoint's")
    encoding.add_argument("--eos-token", help="use this eos_token instead of the checkpoint's")
    encoding.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a template variable for every conversation (a line's chat_template_kwargs "
        "take precedence); VALUE is read as JSON when it parses",
    )
    encoding.add_argument("--now", help="pin strftime_now: unix seconds or ISO 8601 with a zone")
    encoding.add_argument(
        "--no-thinking", dest="thinking", action="store_false", help="enable_thinking=false"
    )
    _add_encoding_options(encoding)
    batch.set_defaults(func=_cmd_batch)


def _add_check_data(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    checkpoint: argparse.ArgumentParser,
) -> None:
    check = commands.add_parser(
        "check-data",
        parents=[checkpoint],
        help="check that each assistant turn of a dataset reads back into its message",
        description="For each assistant turn of each conversation (JSON Lines or Parquet "
        "records with messages, and tools, documents, chat_template_kwargs, id when they "
        "have them), read the turn as rendered by the template with the reply reader a "
        "server sets up for the conversation before it, and compare the message read with "
        "the dataset's (content, reasoning, tool calls). Report per template and per "
        "conversation; exit status 1 when a turn does not read back.",
    )
    check.add_argument(
        "inputs",
        nargs="*",
        metavar="DATASET",
        help="JSON Lines or Parquet files (- or none: stdin)",
    )
    check.add_argument(
        "--json", action="store_true", help="one JSON line per conversation, then the summary"
    )
    check.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="worker processes (0: one per core)",
    )
    check.add_argument(
        "--show",
        type=int,
        default=10,
        metavar="N",
        help="failing conversations to list (default 10)",
    )
    check.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a template variable for every conversation",
    )
    check.add_argument("--now", help="pin strftime_now: unix seconds or ISO 8601 with a zone")
    check.add_argument(
        "--no-thinking", dest="thinking", action="store_false", help="enable_thinking=false"
    )
    check.add_argument(
        "--reasoning-format",
        default="deepseek",
        choices=("deepseek", "auto", "none", "deepseek-legacy"),
    )
    check.add_argument(
        "--policy",
        choices=("guaranteed", "reference"),
        default="guaranteed",
        help="how the turns are read: guaranteed (as chatcodec serve reads replies by default; "
        "docs/decoding.md) or reference (llama.cpp exactly)",
    )
    check.set_defaults(func=_cmd_check_data)


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="chatcodec",
        description="Render prompts and parse replies in a checkpoint's own chat format.",
    )
    parser.add_argument("--version", action="version", version=f"chatcodec {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    checkpoint = _checkpoint_options()
    request = _request_options()

    _add_render(commands, checkpoint, request)
    _add_encode(commands, checkpoint, request)
    _add_parse(commands, checkpoint, request)
    _add_grammar(commands, checkpoint, request)
    inspect_ = commands.add_parser(
        "inspect",
        parents=[checkpoint],
        help="where the template came from, what it can do, how replies are read",
    )
    inspect_.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect_.set_defaults(func=_cmd_inspect)

    _add_batch(commands)
    _add_check_data(commands, checkpoint)
    _add_serve(commands, checkpoint)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # argparse takes a command's positional files in one run: files after an option come
    # back unrecognized, and are the command's inputs all the same
    if extra and hasattr(args, "inputs") and all(x == "-" or not x.startswith("-") for x in extra):
        args.inputs = [*args.inputs, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    prefix = f"chatcodec {args.command}: "
    if getattr(args, "checkpoint", None):
        prefix += f"{args.checkpoint}: "
    with warnings.catch_warnings():
        # one line per distinct warning, in the same form as the error lines
        warnings.simplefilter("once", UnusedVariableWarning)
        warnings.showwarning = lambda message, category, *_rest: print(
            f"{prefix}warning: {message}", file=sys.stderr
        )
        return _run(args, prefix)


def _run(args: argparse.Namespace, prefix: str) -> int:
    try:
        code: int = args.func(args)
        return code
    except UsageError as exc:
        print(f"{prefix}{exc}", file=sys.stderr)
        return 2
    except ChatCodecError as exc:
        print(f"{prefix}{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into head: not an error of ours
        return 0
    except Exception as exc:  # a bug of ours: one line all the same, never a traceback
        print(
            f"{prefix}internal error (a bug in chatcodec: please report it): "
            f"{type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
