"""One request of ``chatcodec batch`` in, one JSON result out (the oracle request schemas).

Two schemas, those of ``../shared/oracle/render/README.md`` and
``../shared/oracle/parse/README.md``:

- a **render** request ``{"id", "template" | "chat_template", "messages", "tools",
  "documents", "add_generation_prompt", "continue_final_message", "now_unix", "kwargs"}``
  gives ``{"id", "rendered"}``, or ``{"id", "error": {"type", "stage", "message"}}`` whose
  ``type`` is the reference's exception class (``TemplateError.kind``);
- with a checkpoint (``chatcodec batch --checkpoint``), every line is an **encode** request,
  a dataset row ``{"id", "messages", "tools", "documents", "chat_template_kwargs"}`` (the
  last four as objects or JSON text), which gives ``{"id", "input_ids", "attention_mask",
  "assistant_masks"}`` (and ``text``, ``offsets`` as asked): ``Codec.encode`` through the
  ``DatasetEncoder`` of ``chatcodec.data``, so a row gives what that encoder gives it (a
  JSON line's nulls kept: they are its own, not a table's padding); or ``{"id", "error":
  {"type", "stage"?, "message"}}``;
- a **parse** request (it has ``outputs``: a request and the model replies to read) gives
  ``{"id", "results": [{"message": ...} | {"error": "..."}, ...]}``, one per output.

A request that cannot be run at all (a missing field, a field of the wrong JSON type, a
template file that is not there or lies outside the template folders) gives
``{"id", "error": {"type": "UsageError", "message"}}``. This module sits at the top of
the package: it drives both halves (``checkpoint``/``codec`` and the reply runtime).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from .codec import Codec
from .data import DatasetEncoder
from .errors import (
    ChatCodecError,
    CheckpointError,
    RequestError,
    TemplateError,
    TemplateNotFoundError,
)
from .template import ChatTemplate

if TYPE_CHECKING:
    from .reply.turn import Turn

__all__ = [
    "TemplateFiles",
    "batch_result",
    "encode_result",
    "is_parse_request",
    "json_line",
    "prepare_request",
    "prepare_with",
    "run_batch",
    "run_encode_batch",
    "safe_result",
]


class TemplateFiles:
    """Finds the template file a request names, and compiles each template once.

    A name is a file name looked up in ``directory``, ``$CHATCODEC_TEMPLATES``,
    ``./chat_templates``, and ``shared/chat_templates`` or ``holdout/chat_templates`` beside
    the working directory or any folder above it (where the oracle corpora keep them).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        candidates = [str(directory)] if directory else []
        candidates += [os.environ.get("CHATCODEC_TEMPLATES", ""), "chat_templates"]
        self.directories = [Path(d) for d in candidates if d]
        here = Path.cwd()
        for base in (here, *here.parents):
            self.directories += [base / "shared" / "chat_templates"]
            self.directories += [base / "holdout" / "chat_templates"]
        self._compiled: dict[str, ChatTemplate | TemplateError] = {}

    def source(self, name: str) -> str:
        """The text of the template file ``name``, a relative path inside one of the search
        folders: an absolute path, a ``..`` climb or a link out of the folder is refused
        (``RequestError``: a request must not read files elsewhere); ``TemplateNotFoundError``
        when no folder has it, ``CheckpointError`` when it cannot be read as UTF-8 text."""
        if not isinstance(name, str) or not name:
            raise RequestError(f"a template name is a file name, not {name!r}")
        relative = PurePath(name)
        if relative.is_absolute() or relative.anchor or ".." in relative.parts or "\0" in name:
            raise RequestError(
                f"template {name!r} is not a file name inside the template folders "
                "(--templates): absolute paths and '..' are refused"
            )
        for base in self.directories:
            path = base / relative
            if not path.is_file():
                continue
            if not path.resolve().is_relative_to(base.resolve()):
                raise RequestError(f"template {name!r} links outside its folder {base}")
            try:
                return path.read_text(encoding="utf-8")
            except (OSError, UnicodeError) as exc:
                raise CheckpointError(f"cannot read template {name!r} from {path}: {exc}") from None
        raise TemplateNotFoundError(
            f"template {name!r} not found (looked in {self.directories[0]}, ...; see --templates)"
        )

    def template(self, name: str) -> ChatTemplate:
        """The compiled template ``name`` (a template that does not compile fails each time)."""
        found = self._compiled.get(name)
        if found is None:
            try:
                found = ChatTemplate(self.source(name), name=name)
            except TemplateError as exc:
                found = exc
            self._compiled[name] = found
        if isinstance(found, TemplateError):
            raise found
        return found


_default_files: TemplateFiles | None = None


def _files(files: TemplateFiles | None) -> TemplateFiles:
    global _default_files
    if files is not None:
        return files
    if _default_files is None:
        _default_files = TemplateFiles()
    return _default_files


def is_parse_request(request: Mapping[str, Any]) -> bool:
    """A request of the parse schema (it carries replies to read), not of the render one."""
    return "outputs" in request or "llama_cpp" in request or "replies" in request


def batch_result(request: Mapping[str, Any], files: TemplateFiles | None = None) -> dict[str, Any]:
    """The result line of one request of either schema (see the module docstring)."""
    try:
        problem = _shape_problem(request)
        if problem:
            message = problem
        elif is_parse_request(request):
            return _parse_result(request, _files(files))
        else:
            return _render_result(request, _files(files))
    except (CheckpointError, RequestError) as exc:  # the template file named: absent, refused
        message = str(exc)
    except KeyError as exc:
        message = f"missing field {exc}"
    return {"id": request.get("id"), "error": {"type": "UsageError", "message": message}}


def safe_result(request: Mapping[str, Any], files: TemplateFiles | None = None) -> dict[str, Any]:
    """``batch_result``, with a bug of chatcodec's as an ``InternalError`` result line: one
    request that trips it must not cost the others."""
    try:
        return batch_result(request, files)
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc} (a bug in chatcodec: please report it)"
        return {"id": request.get("id"), "error": {"type": "InternalError", "message": message}}


# (category, message) of each warning a request raised, to be raised again by the parent
Warned = list[tuple[type[Warning], str]]

_worker_files: TemplateFiles | None = None


def _setup_worker(templates: str | None) -> None:
    global _worker_files
    _worker_files = TemplateFiles(templates)


def _work(item: tuple[dict[str, Any] | None, str]) -> tuple[dict[str, Any], Warned]:
    request, problem = item
    if request is None:
        return {"id": None, "error": {"type": "UsageError", "message": problem}}, []
    return _with_warnings(safe_result, request, _worker_files)


def _with_warnings(call: Any, *args: Any) -> tuple[dict[str, Any], Warned]:
    """``call(*args)`` and the warnings it raised, for the parent to raise again."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call(*args)
    return result, [(w.category, str(w.message)) for w in caught]


def _template_of(item: tuple[dict[str, Any] | None, str]) -> Any:
    """What a worker compiles for a request: the template it names (or brings)."""
    request = item[0]
    if request is None:
        return None
    named = request.get("template")
    if isinstance(named, str):
        return named
    source = request.get("chat_template", request.get("template_source"))
    return hash(source) if isinstance(source, str) else None


def run_batch(
    records: Iterable[tuple[dict[str, Any] | None, str]],
    templates: str | None = None,
    jobs: int = 1,
) -> Iterator[dict[str, Any]]:
    """The result line of each record, in order, over ``jobs`` worker processes (each finds
    and compiles its templates once). A record ``(None, why)`` is a line that could not be
    read: its result is a ``UsageError`` naming ``why``. The warnings a request raises in a
    worker are raised again here (``warnings.warn``), in order."""
    from .workers import ordered_map

    for result, warned in ordered_map(
        _work, records, jobs, setup=_setup_worker, setup_args=(templates,), key=_template_of
    ):
        for category, message in warned:
            warnings.warn(message, category, stacklevel=2)
        yield result


def json_line(value: Any, charset: str = "utf-8", indent: int | None = None) -> str:
    """One JSON document and a newline; text the output's ``charset`` cannot encode (a lone
    surrogate from a ``"\\ud800"`` escape) is written as JSON escapes instead."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    try:
        text.encode(charset)
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, indent=indent)
    return text + "\n"


def encode_result(encoder: DatasetEncoder, record: Mapping[str, Any]) -> dict[str, Any]:
    """The result line of one encode request: the row's ``encoder.encode_row``, or its error
    (a bug of chatcodec's as an ``InternalError``: one row that trips it must not cost the
    others)."""
    result: dict[str, Any] = {"id": record.get("id")}
    try:
        # (a Parquet row's padding nulls were dropped as it was read; a JSON line's are its own)
        result.update(encoder.encode_row(record, padded=False))
    except RequestError as exc:  # a row the encoder cannot read
        result["error"] = {"type": "UsageError", "message": str(exc)}
    except TemplateError as exc:
        result["error"] = {"type": exc.kind, "stage": exc.stage, "message": str(exc)}
    except ChatCodecError as exc:
        result["error"] = {"type": type(exc).__name__, "message": str(exc)}
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc} (a bug in chatcodec: please report it)"
        result["error"] = {"type": "InternalError", "message": message}
    return result


# what a worker of run_encode_batch encodes with, and the charset of the lines it writes
# (None: it hands back the result dicts)
_worker_encoder: tuple[DatasetEncoder, str | None] | None = None


def _setup_encoder(encoder: DatasetEncoder, charset: str | None) -> None:
    global _worker_encoder
    _worker_encoder = (encoder, charset)  # (in a worker, it loads its checkpoint on first use)


def _encode_work(item: tuple[dict[str, Any] | None, str]) -> tuple[Any, Warned]:
    if _worker_encoder is None:
        raise RuntimeError("_setup_encoder was not called in this process")
    encoder, charset = _worker_encoder
    record, problem = item
    if record is None:
        result: dict[str, Any] = {"id": None, "error": {"type": "UsageError", "message": problem}}
        warned: Warned = []
    else:
        result, warned = _with_warnings(encode_result, encoder, record)
    if charset is None:
        return result, warned
    # the line itself: a worker writes it, not the one process all lines pass through
    return (result.get("error", {}).get("type"), json_line(result, charset)), warned


def run_encode_batch(
    records: Iterable[tuple[dict[str, Any] | None, str]],
    encoder: DatasetEncoder,
    jobs: int = 1,
    charset: str | None = None,
) -> Iterator[Any]:
    """``encode_result`` of each record, in order, over ``jobs`` worker processes (each
    loads the encoder's checkpoint once); a record ``(None, why)`` gives a ``UsageError``
    naming ``why``. With a ``charset``, each is ``(error type or None, its JSON line)``
    (``json_line``), written by the worker: a row's token lists would cost the process
    that gathers the results more to serialize than its worker spent encoding it. Warnings
    are raised again here, in order, as ``run_batch`` does."""
    from .workers import ordered_map

    for result, warned in ordered_map(
        _encode_work, records, jobs, setup=_setup_encoder, setup_args=(encoder, charset)
    ):
        for category, message in warned:
            warnings.warn(message, category, stacklevel=2)
        yield result


# the keywords render and prepare take themselves: a template variable cannot be named so
_RENDER_OPTIONS = frozenset(
    {"self", "messages", "tools", "documents", "add_generation_prompt"}
    | {"continue_final_message", "now"}
)
_PREPARE_OPTIONS = frozenset(
    {"self", "messages", "tools", "tool_choice", "parallel_tool_calls", "enable_thinking"}
    | {"reasoning_format", "continue_final_message", "response_format", "now", "tool_call_id"}
)


def _shape_problem(request: Mapping[str, Any]) -> str:
    """What makes a request unusable before it is run ("" when nothing): fields of the wrong
    JSON type that the library does not read itself (messages, tools and options it checks)."""
    parse = is_parse_request(request)
    for field in ("template", "template_source", "bos_token", "eos_token"):
        if request.get(field) is not None and not isinstance(request[field], str):
            return f"{field} must be a string, not {type(request[field]).__name__}"
    field = "chat_template_kwargs" if parse else "kwargs"
    kwargs = request.get(field)
    if kwargs is not None:
        if not isinstance(kwargs, Mapping):
            return f"{field} must be an object, not {type(kwargs).__name__}"
        taken = sorted(
            set(kwargs) & (_PREPARE_OPTIONS - {"enable_thinking"} if parse else _RENDER_OPTIONS)
        )
        if taken:
            return f"{field} cannot set {', '.join(map(repr, taken))}: it is a request field"
    if parse:
        outputs = request.get("outputs", [])
        if not isinstance(outputs, list):
            return f"outputs must be a list, not {type(outputs).__name__}"
        for index, output in enumerate(outputs):
            if not isinstance(output, Mapping) or not isinstance(output.get("text", ""), str):
                return f"output {index} must be an object with a string 'text'"
    return ""


def _render_result(request: Mapping[str, Any], files: TemplateFiles) -> dict[str, Any]:
    result: dict[str, Any] = {"id": request.get("id")}
    try:
        if "chat_template" in request:
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


def _parse_result(request: Mapping[str, Any], files: TemplateFiles) -> dict[str, Any]:
    outputs = request.get("outputs") or []
    if "template" in request and "template_source" not in request:
        request = {**request, "template_source": files.source(request["template"])}
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


# the fields of a parse request that decide its Turn (requests differing in replies share it)
_TURN_FIELDS = (
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
    "response_format",
    "chat_template_kwargs",
)


def prepare_request(request: Mapping[str, Any]) -> Turn:
    """The Turn of one parse request (``Codec.prepare`` with the request's options)."""
    # key order kept: a schema's property order shapes its grammar
    key = json.dumps({k: request.get(k) for k in _TURN_FIELDS if k in request})
    return _prepare_cached(key)


@lru_cache(maxsize=256)
def _prepare_cached(key: str) -> Turn:
    request = json.loads(key)
    source = request.get("template_source")
    if not isinstance(source, str):
        source = _files(None).source(str(request["template"]))
    codec = _codec(source, request.get("bos_token") or "", request.get("eos_token") or "")
    return prepare_with(codec, request)


def prepare_with(codec: Codec, request: Mapping[str, Any]) -> Turn:
    """``codec.prepare`` with a parse request's options, as llama-server reads them (no cache)."""
    kwargs = dict(request.get("chat_template_kwargs") or {})
    # llama-server's rule: chat_template_kwargs' enable_thinking is the request's
    thinking = kwargs.pop("enable_thinking", request.get("enable_thinking", True))
    return codec.prepare(
        request.get("messages") or [],
        tools=request.get("tools"),
        tool_choice=request.get("tool_choice") or "auto",
        parallel_tool_calls=request.get("parallel_tool_calls"),
        enable_thinking=thinking,
        reasoning_format=request.get("reasoning_format") or "deepseek",
        response_format=request.get("response_format"),
        **kwargs,
    )


@lru_cache(maxsize=64)
def _codec(source: str, bos_token: str, eos_token: str) -> Codec:
    # compiling a template costs far more than rendering it: requests of a corpus share it
    return Codec(source, bos_token=bos_token, eos_token=eos_token)
