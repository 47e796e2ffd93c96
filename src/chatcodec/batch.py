"""One request of ``chatcodec batch`` in, one JSON result out (the oracle request schemas).

Two schemas, those of ``../shared/oracle/render/README.md`` and
``../shared/oracle/parse/README.md``:

- a **render** request ``{"id", "template" | "chat_template", "messages", "tools",
  "documents", "add_generation_prompt", "continue_final_message", "now_unix", "kwargs"}``
  gives ``{"id", "rendered"}``, or ``{"id", "error": {"type", "stage", "message"}}`` whose
  ``type`` is the reference's exception class (``TemplateError.kind``);
- a **parse** request (it has ``outputs``: a request and the model replies to read) gives
  ``{"id", "results": [{"message": ...} | {"error": "..."}, ...]}``, one per output.

A request that cannot be run at all (a missing field, a template file that is not there)
gives ``{"id", "error": {"type": "UsageError", "message"}}``. This module sits at the top of
the package: it drives both halves (``checkpoint``/``codec`` and the reply runtime).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .codec import Codec
from .errors import ChatCodecError, TemplateError, TemplateNotFoundError
from .template import ChatTemplate

if TYPE_CHECKING:
    from .reply.turn import Turn

__all__ = ["TemplateFiles", "batch_result", "is_parse_request", "prepare_request"]


class TemplateFiles:
    """Finds the template file a request names, and compiles each template once.

    A name is looked up as a path, then in ``directory``, ``$CHATCODEC_TEMPLATES``,
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
        """The text of the template file ``name``; ``TemplateNotFoundError`` when none is."""
        for base in [Path("."), *self.directories]:
            path = base / name
            if path.is_file():
                return path.read_text(encoding="utf-8")
        raise TemplateNotFoundError(
            f"template {name!r} not found (looked in ., {self.directories[0]}, ...; "
            "see --templates)"
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
        if is_parse_request(request):
            return _parse_result(request, _files(files))
        return _render_result(request, _files(files))
    except TemplateNotFoundError as exc:
        message = str(exc)
    except KeyError as exc:
        message = f"missing field {exc}"
    return {"id": request.get("id"), "error": {"type": "UsageError", "message": message}}


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
    "chat_template_kwargs",
)


def prepare_request(request: Mapping[str, Any]) -> Turn:
    """The Turn of one parse request (``Codec.prepare`` with the request's options)."""
    key = json.dumps({k: request.get(k) for k in _TURN_FIELDS if k in request}, sort_keys=True)
    return _prepare_cached(key)


@lru_cache(maxsize=256)
def _prepare_cached(key: str) -> Turn:
    request = json.loads(key)
    source = request.get("template_source")
    if not isinstance(source, str):
        source = _files(None).source(str(request["template"]))
    codec = _codec(source, request.get("bos_token") or "", request.get("eos_token") or "")
    return codec.prepare(
        request.get("messages") or [],
        tools=request.get("tools"),
        tool_choice=request.get("tool_choice") or "auto",
        parallel_tool_calls=request.get("parallel_tool_calls"),
        enable_thinking=request.get("enable_thinking", True),
        reasoning_format=request.get("reasoning_format") or "deepseek",
        **(request.get("chat_template_kwargs") or {}),
    )


@lru_cache(maxsize=64)
def _codec(source: str, bos_token: str, eos_token: str) -> Codec:
    # compiling a template costs far more than rendering it: requests of a corpus share it
    return Codec(source, bos_token=bos_token, eos_token=eos_token)
