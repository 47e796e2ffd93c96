"""ChatTemplate: compile a checkpoint's chat template once, render it many times.

``render`` has the semantics of transformers' ``apply_chat_template(..., tokenize=False)``
(5.23.0), not just of jinja2: the argument checks, the dropping of ``None`` fields, the
reasoning-field aliases, callable tools, ``continue_final_message`` and the conversion of
every input to plain data all happen the way transformers does them, so the bytes match.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.meta

from ..errors import (
    TemplateArgumentError,
    TemplateError,
    TemplateLimitError,
    TemplateRaisedError,
    TemplateRuntimeError,
    TemplateSecurityError,
    TemplateSyntaxError,
    TemplateTypeError,
    TemplateUndefinedError,
    UnusedVariableWarning,
)
from ..strings import common_prefix_length
from .environment import (
    ChatSandbox,
    FilterMemo,
    LimitExceeded,
    Limits,
    budget_spent,
    call_budget,
    new_environment,
    render_deadline,
    render_state,
    utc_instant,
)

if TYPE_CHECKING:  # imported where derived spans first need it: import chatcodec stays lean
    from .resume import ResumePlan, Watch

__all__ = [
    "ChatTemplate",
    "PrefixRenders",
    "RenderedChat",
    "Span",
    "derive_spans_by_prefixes",
    "raise_if_budget_spent",
]

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# render's own options: a keyword close to one of these is most likely a typo of it
_RENDER_OPTIONS = (
    "messages",
    "tools",
    "documents",
    "add_generation_prompt",
    "continue_final_message",
    "now",
    "template_name",
)
# what servers pass to every template whatever it reads (llama.cpp, chat_template_kwargs):
# not reading them is normal, so they are never reported as unread
_CONVENTIONAL_VARIABLES = frozenset({"enable_thinking", "datetime", "date_string"})
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "

_environment: ChatSandbox | None = None


def _shared_environment() -> ChatSandbox:
    # One environment for every template: its configuration never changes after creation
    global _environment
    if _environment is None:
        _environment = new_environment()
    return _environment


@dataclass(frozen=True)
class Span:
    """Character span ``[start, end)`` of one assistant turn's generated text in a prompt."""

    start: int
    end: int


@dataclass(frozen=True)
class RenderedChat:
    """A rendered prompt with the spans of the assistant's generated text.

    ``source`` is ``"generation_tag"`` when the template marks them with
    ``{% generation %}``, ``"derived"`` when chatcodec found them by rendering prefixes of
    the conversation.
    """

    text: str
    spans: tuple[Span, ...]
    source: str

    def mask(self) -> list[int]:
        """One 0/1 flag per character of ``text``: 1 inside an assistant span."""
        flags = [0] * len(self.text)
        for span in self.spans:
            flags[span.start : span.end] = [1] * (span.end - span.start)
        return flags


@dataclass
class _Inputs:
    """One render's inputs as ``_prepare`` copied them (``made``: the containers it built)."""

    chat: list[dict[str, Any]]
    variables: dict[str, Any]
    now: datetime | None
    made: list[Any]
    continue_field: str | None
    final_text: Any


class ChatTemplate:
    """A compiled chat template.

    ``special_tokens`` (``bos_token``, ``eos_token``, ...) are put in the context of every
    render, under whatever ``render`` is given, as transformers puts the tokenizer's
    special tokens map there.
    """

    def __init__(
        self,
        source: str,
        *,
        special_tokens: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(source, str):
            raise TemplateSyntaxError(
                f"a chat template is Jinja source text, not {type(source).__name__}",
                stage="compile",
                kind="TypeError",
            )
        self.source = source
        self.name = name
        self.special_tokens: dict[str, str] = dict(special_tokens or {})
        self.limits = limits or Limits()
        env = self._environment()
        try:
            self._template = _compile(env, source, self.limits)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateSyntaxError(
                f"the chat template does not compile: {exc.message}",
                stage="compile",
                kind=type(exc).__name__,
                lineno=exc.lineno,
            ) from None
        except RecursionError:
            raise TemplateLimitError(
                "the chat template nests too deeply to compile",
                stage="compile",
                kind="RecursionError",
            ) from None
        except Exception as exc:  # jinja2 compiles templates to Python: anything may surface
            raise TemplateSyntaxError(
                f"the chat template does not compile: {exc}",
                stage="compile",
                kind=type(exc).__name__,
            ) from None
        self._variables: frozenset[str] | None = None
        self._plan: ResumePlan | None | bool = False  # False: not looked for yet
        self._resume_tally = [0, 0]  # prefixes resumed, rendered from the start, so far
        # derived spans, for each prefix cost (in whole renders) where watching may or may
        # not pay: the seconds per render unit of its conversations watched and rendered
        # prefix by prefix while both are tried, and then whether it is watched
        self._trials: dict[int, tuple[list[float], list[float]]] = {}
        self._watches: dict[int, bool] = {}
        # A name token reading exactly `generation` is that word followed by no word
        # character (jinja's names extend over all of them): without one, lexing finds none
        self.has_generation_tag = _GENERATION_WORD.search(source) is not None and (
            _has_generation_tag(env, source)
        )
        # What Template.new_context rebuilds on every render: the template's globals (a
        # ChainMap over the environment's) flattened. Neither changes after compilation.
        self._globals: dict[str, Any] = dict(self._template.globals)

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<ChatTemplate{label} {len(self.source)} chars>"

    @staticmethod
    def _environment() -> ChatSandbox:
        """The environment templates of this class compile in (transformers' sandbox)."""
        return _shared_environment()

    @property
    def variables(self) -> frozenset[str]:
        """Names the template reads from its context (messages, tools, custom flags, ...)."""
        if self._variables is None:
            env = self._environment()
            self._variables = frozenset(
                jinja2.meta.find_undeclared_variables(env.parse(self.source))
            )
        return self._variables

    # --- rendering --------------------------------------------------------------------

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any] | Callable[..., Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        now: float | int | datetime | None = None,
        **context: Any,
    ) -> str:
        """The prompt text, exactly as ``apply_chat_template(..., tokenize=False)`` gives it.

        A keyword in ``context`` that the template never reads is passed on all the same, as
        transformers does, with an ``UnusedVariableWarning`` naming the closest option or
        variable (special tokens and ``enable_thinking`` excepted: see docs/errors.md).
        """
        if context:
            self._warn_unread(context)
        return self._render(
            messages,
            tools,
            documents,
            add_generation_prompt,
            continue_final_message,
            now,
            context,
            None,
        )

    def render_with_spans(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any] | Callable[..., Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        now: float | int | datetime | None = None,
        **context: Any,
    ) -> RenderedChat:
        """The prompt plus the spans of each assistant turn's generated text.

        With a ``{% generation %}`` tag the spans are the tag's, as transformers records them
        for ``return_assistant_tokens_mask``. Without one they are derived: for assistant
        message ``i`` the turn's text starts where the render of ``messages[:i]`` with a
        generation prompt ends, and stops where the render of ``messages[:i + 1]`` ends,
        trailing whitespace excluded (the newline between turns is not generated). That is
        ``derive_spans_by_prefixes``'s definition, and its spans are the ones given; the
        prefixes are rendered from the full render's copy of the inputs, ``|tojson`` of
        those inputs computed once (docs/rendering.md, "What derived spans cost").
        """
        if context:
            self._warn_unread(context)
        with call_budget(self.limits, "deriving the assistant spans"):
            return self._render_with_spans(
                messages, tools, documents, add_generation_prompt, now, context
            )

    def _render_with_spans(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Any,
        documents: Any,
        add_generation_prompt: bool,
        now: float | int | datetime | None,
        context: dict[str, Any],
    ) -> RenderedChat:
        if self.has_generation_tag:
            spans: list[tuple[int, int]] = []
            text = self._render(
                messages, tools, documents, add_generation_prompt, False, now, context, spans
            )
            return RenderedChat(text, tuple(Span(s, e) for s, e in spans), "generation_tag")
        inputs = self._inputs(
            messages, tools, documents, add_generation_prompt, False, now, context
        )
        if isinstance(messages, (list, tuple)) and self._environment().immutable_inputs:
            turns = _assistant_turns(messages)
            cost, units = _prefix_cost(turns, len(messages), add_generation_prompt)
            worth = self._worth_watching(cost) and self._resuming_pays()
            started = time.perf_counter()
            prefixes = PrefixRenders(self, inputs, self._resume_plan() if worth else None)
            derived = _spans_from_shared_inputs(prefixes, messages, turns)
            self._tried(worth, cost, (time.perf_counter() - started) / units)
            if worth:  # (prefixes of a render not watched say nothing of resuming)
                self._resume_tally[0] += prefixes.resumed
                self._resume_tally[1] += prefixes.rendered
            return RenderedChat(prefixes.text, derived, "derived")
        # the template may change what it is given: each prefix gets its own copy
        text = self._run(inputs.chat, inputs.variables, inputs.now, None, inputs.made)
        derived = derive_spans_by_prefixes(self, text, messages, tools, documents, now, context)
        return RenderedChat(text, derived, "derived")

    def _resuming_pays(self) -> bool:
        """Whether watching a render has paid on this template's conversations so far: a
        template whose prefixes rarely resume (every pass counts the messages, say) saves
        the watched render's cost by rendering its prefixes from the start. Either way the
        spans are the same."""
        resumed, rendered = self._resume_tally
        return resumed + rendered < _TALLY_SEEN or resumed >= _TALLY_SHARE * (resumed + rendered)

    def _worth_watching(self, cost: float) -> bool:
        """Whether to watch a conversation whose prefixes cost ``cost`` renders from the
        start: below ``_WATCHING_PAYS`` never, from ``_WATCHING_ALWAYS`` always, and between
        them as this template's trials of that cost (in whole renders) found, each way in
        turn until then. How much a resumed prefix costs depends on the template (one whose
        start walks every message runs it again in each prefix): Llama 3.1 gains from 7
        messages, Qwen3 from about 17. The spans are the same either way."""
        if cost < _WATCHING_PAYS:
            return False
        if cost >= _WATCHING_ALWAYS:
            return True
        band = int(cost)
        if band in self._watches:
            return self._watches[band]
        watched, rendered = self._trials.get(band, ((), ()))
        return len(watched) <= len(rendered)

    def _tried(self, watched: bool, cost: float, seconds: float) -> None:
        """Note how long a conversation's spans took a render unit (``_prefix_cost``) where
        its cost is on trial; with ``_TRIALS`` each way, watch that cost from then on if the
        median watched one was faster (medians: a conversation the machine slowed down
        does not decide)."""
        band = int(cost)
        if cost < _WATCHING_PAYS or cost >= _WATCHING_ALWAYS or band in self._watches:
            return
        trials = self._trials.setdefault(band, ([], []))
        trials[0 if watched else 1].append(seconds)
        if min(map(len, trials)) >= _TRIALS:
            self._watches[band] = _middle(trials[0]) < _middle(trials[1])
            del self._trials[band]

    def _resume_plan(self) -> ResumePlan | None:
        """How prefixes of a conversation resume from its render (template/resume.py)."""
        if self._plan is False:
            from .resume import ResumePlan

            env = self._environment()
            try:
                self._plan = ResumePlan.build(
                    env.parse(self.source), lambda tree: _compile(env, tree, self.limits)
                )
            except Exception as exc:  # noqa: BLE001 - a shape it cannot take: render whole
                raise_if_budget_spent(exc)
                self._plan = None
        return self._plan  # type: ignore[return-value]

    def _warn_unread(self, context: Mapping[str, Any]) -> None:
        unread = context.keys() - self.variables  # variables: parsed once, then cached
        for name in sorted(unread):
            if name in _CONVENTIONAL_VARIABLES or name.endswith(("_token", "_tokens")):
                continue
            import difflib  # only when there is something to report: import chatcodec stays lean

            known = [k for k in (*_RENDER_OPTIONS, *sorted(self.variables)) if k != name]
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            warnings.warn(
                f"the chat template never reads {name!r}, so passing it changes nothing{hint}",
                UnusedVariableWarning,
                stacklevel=_caller_level(),
            )

    def _render(
        self,
        messages: Any,
        tools: Any,
        documents: Any,
        add_generation_prompt: bool,
        continue_final_message: bool | str,
        now: float | int | datetime | None,
        context: dict[str, Any],
        spans: list[tuple[int, int]] | None,
    ) -> str:
        inputs = self._inputs(
            messages, tools, documents, add_generation_prompt, continue_final_message, now, context
        )
        rendered = self._run(inputs.chat, inputs.variables, inputs.now, spans, inputs.made)
        if inputs.continue_field is not None:
            rendered = _cut_at_continue_tag(rendered, inputs.final_text)
        return rendered

    def _inputs(
        self,
        messages: Any,
        tools: Any,
        documents: Any,
        add_generation_prompt: bool,
        continue_final_message: bool | str,
        now: float | int | datetime | None,
        context: dict[str, Any],
    ) -> _Inputs:
        """What one render is given, checked and copied as transformers copies it."""
        made: list[Any] = []  # the containers _prepare builds: the caller's data
        try:
            chat, variables, continue_field, final_text = self._prepare(
                messages,
                tools,
                documents,
                add_generation_prompt,
                continue_final_message,
                context,
                made,
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise TemplateArgumentError(str(exc), stage="render", kind=type(exc).__name__) from None
        except RecursionError:  # a self-referencing message, tool or keyword argument
            raise TemplateArgumentError(
                "the render arguments nest too deeply (or refer to themselves) to be copied",
                stage="render",
                kind="RecursionError",
            ) from None
        pinned = None
        if now is not None:
            try:
                pinned = _pinned_instant(now) if type(now) in (int, float) else utc_instant(now)
            except (ValueError, TypeError, OverflowError, OSError) as exc:
                raise TemplateArgumentError(
                    f"now must be unix seconds or an aware datetime: {exc}",
                    stage="render",
                    kind="ValueError",
                ) from None
        return _Inputs(chat, variables, pinned, made, continue_field, final_text)

    def _prepare(
        self,
        messages: Any,
        tools: Any,
        documents: Any,
        add_generation_prompt: bool,
        continue_final_message: bool | str,
        context: dict[str, Any],
        made: list[Any] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any], str | None, str]:
        # The checks and conversions of apply_chat_template + render_jinja_template, in order.
        # The containers built from the caller's data are appended to `made`.
        if isinstance(messages, (list, tuple)) and len(messages) == 0:
            raise ValueError(
                "Cannot apply chat template to an empty conversation. Provide at least one message."
            )
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
            raise TypeError(
                f"messages must be a list of message dicts, not {type(messages).__name__}"
            )
        chat: Any = [_without_none_fields(msg, index) for index, msg in enumerate(messages)]
        if continue_final_message and add_generation_prompt:
            raise ValueError(
                "continue_final_message and add_generation_prompt are not compatible. Use "
                "continue_final_message when you want the model to continue the final message, and "
                "add_generation_prompt when you want to add a header that will prompt it to start a "
                "new assistant message instead."
            )
        variables: dict[str, Any] = {**self.special_tokens, **context}
        tool_schemas = None if tools is None else [_tool_schema(tool) for tool in tools]
        if documents is not None:
            for document in documents:
                if not isinstance(document, dict):
                    raise TypeError(
                        "Documents should be a list of dicts with 'title' and 'text' keys!"
                    )
        variables = plain_data(variables, made)
        chat = plain_data(chat, made)
        for message in chat:
            if not isinstance(message, dict):
                raise TypeError(
                    f"Chat messages should be dicts, dataclasses or pydantic models, but got {message!r}."
                )
        chat = _alias_reasoning_fields(chat)
        continue_field: str | None = None
        final_text = ""
        if continue_final_message:
            continue_field, final_text = self._tag_final_message(chat, continue_final_message)
        variables["messages"] = chat
        variables["tools"] = plain_data(tool_schemas, made)
        variables["documents"] = plain_data(documents, made)
        variables["add_generation_prompt"] = add_generation_prompt
        return chat, variables, continue_field, final_text

    def _tag_final_message(self, chat: list[dict[str, Any]], which: bool | str) -> tuple[str, str]:
        if not chat:
            raise ValueError("continue_final_message is set but the conversation is empty!")
        field = which if isinstance(which, str) else "content"
        final = chat[-1].get(field)
        if final is None:
            raise ValueError(
                f'continue_final_message is set but the final message has no "{field}" to continue!'
            )
        fields = [field]
        if field in _REASONING_FIELDS:
            # reasoning is copied under several names: tag every copy the template might read
            fields = [name for name in _REASONING_FIELDS if chat[-1].get(name) == final]
        if not any(name in self.source for name in fields):
            raise ValueError(
                f'continue_final_message is set to "{field}" but this is not an accepted field in the '
                "chat_template"
            )
        if isinstance(final, (list, tuple)):
            for block in reversed(final):
                if "text" in block:
                    text = block["text"]
                    block["text"] = block["text"] + _CONTINUE_TAG
                    return field, text
            raise ValueError(
                "continue_final_message is set but we could not find any text to continue in the final "
                "message!"
            )
        for name in fields:
            chat[-1][name] = chat[-1][name] + _CONTINUE_TAG
        return field, final

    def _run(
        self,
        chat: list[dict[str, Any]],
        variables: dict[str, Any],
        now: datetime | None,
        spans: list[tuple[int, int]] | None,
        made: list[Any] | None = None,
        compiled: tuple[jinja2.Template, dict[str, Any]] | None = None,
    ) -> str:
        # compiled: another compilation of this template (a plan's watched one), its globals
        template, globals_ = compiled or (self._template, self._globals)
        state = render_state
        limit = self.limits.max_output_chars
        # The caller's containers, which an immutable sandbox keeps as they are: printing one
        # of them prints what the caller passed, so it is not measured first (`made` keeps
        # them alive, so no other value can take one's id during the render)
        saved = state.begin(
            render_deadline(self.limits.max_seconds),
            limit,
            spans,
            now,
            made if self._environment().immutable_inputs else None,
        )
        parts: list[str] = []
        append = parts.append
        size = 0
        try:
            # = template.new_context(variables): a Context over dict(globals, **vars) whose
            # globals_keys are the globals' keys; the flattened globals are kept from compile
            env = template.environment
            context = env.context_class(
                env, dict(globals_, **variables), template.name, template.blocks, globals=globals_
            )
            if time.monotonic() > state.deadline:  # (its call's budget is spent)
                raise LimitExceeded("the render ran past its time limit")
            if spans is None:  # nothing reads state.position without spans to record
                for chunk in template.root_render_func(context):
                    size += len(chunk)
                    if size > limit:
                        raise LimitExceeded(
                            f"the rendered prompt passed the output limit of {limit} chars"
                        )
                    append(chunk)
            else:
                for chunk in template.root_render_func(context):
                    size += len(chunk)
                    if size > limit:
                        raise LimitExceeded(
                            f"the rendered prompt passed the output limit of {limit} chars"
                        )
                    state.position = size
                    append(chunk)
        except LimitExceeded as exc:
            raise TemplateLimitError(
                _limit_message(exc), stage="render", kind="LimitExceeded"
            ) from None
        except RecursionError:
            raise TemplateLimitError(
                "the template recursed too deeply", stage="render", kind="RecursionError"
            ) from None
        except MemoryError:
            raise TemplateLimitError(
                "the template ran out of memory", stage="render", kind="MemoryError"
            ) from None
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateSecurityError(
                str(exc), stage="render", kind="SecurityError", lineno=_template_line(exc)
            ) from None
        except Exception as exc:  # the template is code: whatever it raises becomes ours
            raise _runtime_error(exc)(
                _message(exc), stage="render", kind=type(exc).__name__, lineno=_template_line(exc)
            ) from None
        finally:
            state.end(saved)
        return "".join(parts)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# jinja evaluates filters on literals while compiling (constant folding) and writes the
# result into the generated Python source: `('ab')|batch(10**6, 'x')|list` would be a
# million-item literal for Python to compile. Folding runs under these bounds; a filter
# that passes them is not folded, so it runs at render time under the template's limits.
_FOLDED_CHARS = 1 << 16


def _compile(
    env: ChatSandbox, source: str | jinja2.nodes.Template, limits: Limits
) -> jinja2.Template:
    """``source`` compiled (text, or a tree ``env.parse`` gave and a plan rewrote)."""
    state = render_state
    saved = (state.deadline, state.max_chars)
    state.deadline = render_deadline(limits.max_seconds)
    state.max_chars = min(limits.max_output_chars, _FOLDED_CHARS)
    try:
        if isinstance(source, str):
            return env.from_string(source)
        code = env.compile(source)
        return env.template_class.from_code(env, code, env.make_globals(None), None)
    finally:
        state.deadline, state.max_chars = saved


def _limit_message(exc: LimitExceeded) -> str:
    """A render limit's message; one that came when the call's shared time ran out says
    how long the call had and which of its steps was running."""
    spent = budget_spent()
    if spent is None:
        return str(exc)
    return (
        f"{exc}: the {spent.seconds:g} s its call has for all of its renders ran out while "
        f"{spent.step}"
    )


def raise_if_budget_spent(exc: BaseException) -> None:
    """For code that takes a failed render as an answer (a probe or a prefix the template
    refuses): raise the time limit's ``TemplateLimitError`` instead when the budget of the
    call in progress is spent (``exc`` itself when it is that error), as no later render of
    the call can succeed; else return."""
    if budget_spent() is None:
        return
    if isinstance(exc, TemplateLimitError):
        raise exc
    raise TemplateLimitError(
        _limit_message(LimitExceeded("the render ran past its time limit")),
        stage="render",
        kind="LimitExceeded",
    ) from None


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside chatcodec: a warning names the line of
    the caller's code that passed the keyword, through Codec.render or Codec.prepare alike."""
    frame = sys._getframe(1)  # the frame that calls warnings.warn
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def _runtime_error(exc: BaseException) -> type[TemplateRuntimeError]:
    """The chatcodec type of what a template's code raised while rendering."""
    if type(exc) is jinja2.exceptions.TemplateError:  # only raise_exception raises the base
        return TemplateRaisedError
    if isinstance(exc, jinja2.exceptions.UndefinedError):
        return TemplateUndefinedError
    if isinstance(exc, TypeError):
        return TemplateTypeError
    return TemplateRuntimeError


def _message(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


def _template_line(exc: BaseException) -> int | None:
    # The line of the template the failure happened on, from the compiled template's frames
    line = None
    tb = exc.__traceback__
    while tb is not None:
        template = tb.tb_frame.f_globals.get("__jinja_template__")
        if template is not None:
            try:
                line = template.get_corresponding_lineno(tb.tb_lineno)
            except Exception:  # pragma: no cover - debug info is best effort
                pass
        tb = tb.tb_next
    return line


def _has_generation_tag(env: ChatSandbox, source: str) -> bool:
    try:
        for token in env.lex(source):
            if token[1] == "name" and token[2] == "generation":
                return True
    except jinja2.TemplateSyntaxError:  # pragma: no cover - the source compiled already
        return False
    return False


def _cut_at_continue_tag(rendered: str, final_text: Any) -> str:
    stripped_tag = _CONTINUE_TAG.strip()
    if str(final_text).strip() not in rendered or stripped_tag not in rendered:
        raise TemplateArgumentError(
            "continue_final_message is set but the final message does not appear in the chat after "
            "applying the chat template! This can happen if the chat template deletes portions of the "
            "final message. Please verify the chat template and final message in your chat to ensure "
            "they are compatible."
            f"Final message to continue: {str(final_text).strip()}\nRendered chat:\n{rendered}",
            stage="render",
            kind="ValueError",
        )
    at = rendered.rindex(stripped_tag)
    if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return rendered[:at]
    return rendered[:at].rstrip()  # the template trimmed trailing spacing


def _without_none_fields(message: Any, index: int) -> Any:
    # transformers' `{k: v for k, v in msg.items() if v is not None}`: the same AttributeError
    # (the kind the reference reports) for a message with no items, saying which one it is
    try:
        items = message.items()
    except AttributeError:
        raise AttributeError(
            f"message {index} is {_a(type(message).__name__)}, not a mapping of fields"
        ) from None
    return {k: v for k, v in items if v is not None}


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"


def request_lists(messages: Any, tools: Any) -> tuple[list[Any], list[Any] | None, str]:
    """``messages`` and ``tools`` as lists, and what is wrong with their shape (``""`` when
    nothing is): messages a list (or other non-text iterable) of mappings, tools ``None`` or
    a list of mappings (OpenAI tool schemas). For the callers that read the messages
    themselves before any render (``Codec.prepare``, ``to_template_messages``); each raises
    its own error type with the text."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        what = _a(type(messages).__name__)
        return [], None, f"messages must be a list of message mappings, not {what}"
    listed = list(messages)
    for index, message in enumerate(listed):
        if not isinstance(message, Mapping):
            what = _a(type(message).__name__)
            return listed, None, f"message {index} is {what}, not a mapping of fields"
    if tools is None:
        return listed, None, ""
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        what = _a(type(tools).__name__)
        return listed, None, f"tools must be a list of OpenAI tool schemas, not {what}"
    tool_list = list(tools)
    for index, tool in enumerate(tool_list):
        if not isinstance(tool, Mapping):
            what = _a(type(tool).__name__)
            hint = " (get_json_schema(function) makes one)" if callable(tool) else ""
            return listed, tool_list, f"tool {index} is {what}, not a tool schema mapping{hint}"
    return listed, tool_list, ""


def _alias_reasoning_fields(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # transformers fills `reasoning_content` from the older names, and `thinking` for gpt-oss
    aliased = []
    for message in chat:
        reasoning = next(
            (message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None
        )
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        aliased.append(message)
    return aliased


def _tool_schema(tool: Any) -> Any:
    if isinstance(tool, dict):
        return tool
    if isinstance(tool, (types.FunctionType, types.MethodType)):  # inspect's own test
        from .schema import get_json_schema

        return get_json_schema(tool)
    raise ValueError(
        "Tools should either be a JSON schema, or a callable function with type hints and a docstring "
        "suitable for auto-conversion to a schema."
    )


@functools.lru_cache(maxsize=64)
def _pinned_instant(now: float) -> datetime:
    # utc_instant of unix seconds is a pure function of the number (1, 1.0 and True alike);
    # failures are raised, never cached. datetimes are immutable, so sharing one is safe.
    return utc_instant(now)


_SCALARS = frozenset({str, int, float, bool, type(None)})
_GENERATION_WORD = re.compile(r"generation(?!\w)")


def plain_data(value: Any, made: list[Any] | None = None) -> Any:
    """Rebuild a value out of plain JSON types, as transformers does before a render.

    A template only ever sees fresh dicts, lists, strings and numbers: never the caller's own
    objects (so it cannot mutate them) and never rich objects whose methods the sandbox does
    not know about (those become a ``"<TypeName>"`` placeholder). Each dict, list and tuple
    built is appended to ``made`` when one is given.
    """
    kind = type(value)
    if kind in _SCALARS:  # None, or exactly a str, int, float or bool: kept as is
        return value
    # Below, `x if type(x) in _SCALARS else plain_data(x)` is plain_data(x) without the call
    if kind is dict:
        built: Any = {
            (k if type(k) in _SCALARS else plain_data(k, made)): (
                v if type(v) in _SCALARS else plain_data(v, made)
            )
            for k, v in value.items()
        }
    elif kind is list:
        built = [item if type(item) in _SCALARS else plain_data(item, made) for item in value]
    else:
        return _plain_other(value, kind, made)
    if made is not None:
        made.append(built)
    return built


def _plain_other(value: Any, kind: type, made: list[Any] | None) -> Any:
    if isinstance(value, Mapping):
        built: Any = {plain_data(k, made): plain_data(v, made) for k, v in value.items()}
        if made is not None:
            made.append(built)
        return built
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, (list, tuple)):
        items = [plain_data(item, made) for item in value]
        built = items if isinstance(value, list) else tuple(items)
        if made is not None:
            made.append(built)
        return built
    if any(c.__name__ == "generic" and c.__module__ == "numpy" for c in kind.__mro__):
        return plain_data(
            value.item()
        )  # numpy scalars; np.bool_ would otherwise be a truthy string
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        built = {f.name: plain_data(getattr(value, f.name), made) for f in fields}
        if made is not None:
            made.append(built)
        return built
    if callable(getattr(value, "model_dump", None)):
        return plain_data(value.model_dump(), made)
    return f"<{kind.__name__}>"


def derive_spans_by_prefixes(
    template: ChatTemplate,
    text: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Any,
    documents: Any,
    now: Any,
    context: dict[str, Any],
) -> tuple[Span, ...]:
    """The assistant spans of ``text`` (the render of ``messages``), derived by rendering
    prefixes: for assistant message ``i``, ``messages[:i]`` with the generation prompt and
    ``messages[:i + 1]`` without it, each from its own copy of the inputs. The reference
    ``render_with_spans`` is held to (tests, benchmarks/spans.py). Its renders share one
    budget (the template's limits)."""
    with call_budget(template.limits, "deriving the assistant spans"):
        spans: list[Span] = []
        cursor = 0
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping) or message.get("role") != "assistant":
                continue
            before = list(messages[:index])
            upto = list(messages[: index + 1])
            try:
                head = (
                    template._render(before, tools, documents, True, False, now, context, None)
                    if before
                    else ""
                )
                turn = template._render(upto, tools, documents, False, False, now, context, None)
            except TemplateError as exc:
                raise_if_budget_spent(exc)
                continue  # a prefix this template refuses (e.g. it must start with a user turn)
            content = message.get("content")
            anchor = content.strip() if isinstance(content, str) else ""
            span = _locate_turn(text, (0, head), (0, turn), cursor, anchor)
            if span is not None:
                spans.append(span)
                cursor = span.end
        return tuple(spans)


class PrefixRenders:
    """The render of one conversation, and the renders of its first ``n`` messages.

    A prefix is rendered from the full render's copy of the inputs (a list of the first
    ``n`` messages, like the one _prepare gives a template): every copy and check of
    ``_prepare`` works message by message, and the sandbox is immutable, so no render can
    change what the next one reads. Where the template has a plan (template/resume.py) the
    full render is watched and a prefix resumes from it; a prefix it cannot resume is
    rendered from the start. ``resumed`` and ``rendered`` count the two.
    """

    def __init__(self, template: ChatTemplate, inputs: _Inputs, plan: ResumePlan | None) -> None:
        self.template, self.inputs, self.plan = template, inputs, plan
        self.flag: bool = inputs.variables["add_generation_prompt"]
        self.resumed = self.rendered = 0
        # by the number of messages watched (the conversation's, or a turn's: see render)
        # and the flag
        self._watched: dict[Any, tuple[Watch, str] | None] = {}
        self._names: dict[str, Any] | None = None
        self._turn_ends: list[int] | None = None  # _find_turn_ends's
        self._turns: set[int] = set()  # turns watched (with the flag of the whole's render)
        self._turns_failed: set[int] = set()  # those whose render did not serve a prefix
        # _resume_answered's messages, and the prefixes their render missed before it served
        self._answered: int | None = None
        self._answered_missed = 0
        if plan is None:
            self.text = template._run(inputs.chat, inputs.variables, inputs.now, None, inputs.made)
        else:
            self.text = self._watch(self.flag, raising=True)[1]  # type: ignore[index]

    def _watch(
        self, flag: bool, raising: bool = False, size: int | None = None
    ) -> tuple[Watch, str] | None:
        """The watched render of the whole conversation (or of its first ``size``
        messages) with this generation-prompt flag; None when the template refuses it."""
        key = (size, flag) if size is not None else flag  # (the whole's: the most asked)
        if key in self._watched:
            return self._watched[key]
        from .resume import Watch

        inputs, plan = self.inputs, self.plan
        size = len(inputs.chat) if size is None else size
        assert plan is not None
        chat = inputs.chat if size == len(inputs.chat) else inputs.chat[:size]
        for trace in (True, False) if plan.traces else (False,):
            watch = Watch(chat)
            watch.trace = trace
            given = watch.trace_flag(flag) if trace and plan.reads_flag_early else flag
            variables = dict(inputs.variables, messages=watch.messages, add_generation_prompt=given)
            variables.update(watch.hooks(self.template._globals))
            compiled = (plan.watched, plan.watched_globals)
            try:
                text = self.template._run(chat, variables, inputs.now, [], inputs.made, compiled)
            except TemplateError as exc:
                raise_if_budget_spent(exc)
                if watch.traced:
                    continue  # a traced value refused a use (|tojson): watched untraced
                if raising:
                    raise
                self._watched[key] = None
                return None
            finally:
                watch.finish()
            if not trace:
                plan.traces = False  # traced values broke this template: not tried again
            self._watched[key] = (watch, text)
            return watch, text
        raise AssertionError("unreachable: the untraced render returns or raises")

    @classmethod
    def of(
        cls,
        template: ChatTemplate,
        messages: Sequence[Mapping[str, Any]],
        tools: Any = None,
        documents: Any = None,
        add_generation_prompt: bool = False,
        now: float | int | datetime | None = None,
        **context: Any,
    ) -> PrefixRenders:
        """The renders of one conversation's prefixes, as ``render_with_spans`` makes them."""
        inputs = template._inputs(
            messages, tools, documents, add_generation_prompt, False, now, context
        )
        return cls(template, inputs, template._resume_plan())

    def render(self, n: int, prompt: bool) -> str | None:
        """The render of the first ``n`` messages; None when the template refuses it. Runs
        inside ``resuming``."""
        parts = self.render_parts(n, prompt)
        if parts is None:
            return None
        kept, rest = parts
        return self.text[:kept] + rest if kept else rest

    def render_parts(self, n: int, prompt: bool) -> tuple[int, str] | None:
        """``render``'s text as how many first characters of the full render's it shares
        (``kept``) and the text that follows them: the render is ``text[:kept] + rest``
        (the full render's text is not copied for each prefix)."""
        plan, inputs = self.plan, self.inputs
        if plan is not None:
            if self._names is None:
                self._names = plan.context_names(inputs.variables)
            tried = None
            main = self._watched.get(self.flag) or self._watch(self.flag)
            if main is not None and main[0].traced:  # (else no prefix resumes far back)
                ends = self._turn_ends or self._find_turn_ends()
                turn = ends[min(n, len(ends) - 1)]
                # (a turn that ends soon has too few prefixes left to pay for its render)
                if (
                    turn < len(inputs.chat)
                    and (n + _PASSES_BACK <= turn or turn in self._turns)
                    and turn not in self._turns_failed
                ):
                    parts, tried = self._resume_in_turn(main, turn, n, prompt)
                    if parts is not None:
                        return parts
            parts = self._resume_watched(n, prompt, None, tried)
            if parts is None:
                parts = self._resume_answered(n, prompt)
            if parts is not None:
                return parts
        self.rendered += 1
        chat = inputs.chat[:n]
        variables = dict(inputs.variables, messages=chat, add_generation_prompt=prompt)
        try:
            return 0, self.template._run(chat, variables, inputs.now, None, inputs.made)
        except TemplateError as exc:
            raise_if_budget_spent(exc)
            return None

    def _resume_in_turn(
        self, main: tuple[Watch, str], turn: int, n: int, prompt: bool
    ) -> tuple[tuple[int, str] | None, tuple[Watch, str] | None]:
        """The first ``n`` messages resumed from the whole render (``main``), or, where its
        passes would run again from far back, from the render of their turn (the first
        ``turn`` messages, up to the next user message): a prefix whose values (its own
        last user query) change the whole render's passes from far back would run them
        all again, and the next prefixes of its turn too; in their turn's render those
        values are their own (render watches a turn only when it goes on long enough to
        pay for its render). With the render that could not resume it at all, if any."""
        plan, names = self.plan, self._names
        assert plan is not None and names is not None
        try:
            resumed = plan.resume(*main, names, n, prompt, _PASSES_BACK)
        except plan.TooManyPasses:
            pass
        else:
            return (None, main) if resumed is None else (self._resumed(main, resumed), None)
        in_turn = self._watch(self.flag, size=turn)
        self._turns.add(turn)
        if in_turn is not None:
            try:
                resumed = plan.resume(*in_turn, names, n, prompt, _PASSES_BACK)
            except plan.TooManyPasses:
                resumed = None
            if resumed is not None:
                return self._resumed(in_turn, resumed), None
        self._turns_failed.add(turn)  # (its render does not serve: not tried again)
        return None, None

    def _resume_answered(self, n: int, prompt: bool) -> tuple[int, str] | None:
        """The first ``n`` messages resumed from the watched render of the conversation up
        to its last assistant message, where it goes on after it: a template that shows
        the last message otherwise when it is the assistant's (Nemotron Nano v2 takes it out
        of its loop, for its end) renders the whole conversation as no prefix up to an
        answer, and that one as them all. Only for a template whose start slices a list
        short of its end; not tried again once it missed _ANSWERED_TRIES prefixes before
        serving one."""
        plan, chat = self.plan, self.inputs.chat
        assert plan is not None
        if not plan.cuts:
            return None  # (its start cuts nothing short: no render serves a prefix better)
        if self._answered is None:
            turns = _assistant_turns(chat)
            self._answered = turns[-1] + 1 if turns else 0
        size = self._answered
        if not n <= size < len(chat) or self._answered_missed >= _ANSWERED_TRIES:
            return None
        parts = self._resume_watched(n, prompt, size)
        if parts is None:
            self._answered_missed += 1
        else:
            self._answered_missed = -len(chat)  # (it serves: tried for every prefix)
        return parts

    def _resume_watched(
        self, n: int, prompt: bool, size: int | None, tried: tuple[Watch, str] | None = None
    ) -> tuple[int, str] | None:
        """The first ``n`` messages resumed from the watched render of the conversation (or
        of its first ``size`` messages) but ``tried``: a template that reads the flag
        before its loop ends resumes from the render with the other flag traced (see
        resume._Traced), else from one with its own."""
        plan, names = self.plan, self._names
        assert plan is not None and names is not None
        other = plan.reads_flag_early and prompt != self.flag
        for flag in (self.flag, prompt) if other else (self.flag,):
            watched = self._watch(flag, size=size)
            if watched is None or watched is tried:
                continue
            if other and flag != prompt and watched[0].flag is None:
                continue  # the flag was not traced: the render with the prefix's own
            resumed = plan.resume(*watched, names, n, prompt)
            if resumed is not None:
                return self._resumed(watched, resumed)
        return None

    def _resumed(self, watched: tuple[Watch, str], resumed: tuple[int, str]) -> tuple[int, str]:
        """A prefix's text resumed from ``watched`` (counted), as ``render_parts`` gives it:
        a render other than the full one's (a turn's shares less of it) is joined."""
        self.resumed += 1
        position, rest = resumed
        if watched[1] is self.text:
            return resumed
        return 0, watched[1][:position] + rest

    def _find_turn_ends(self) -> list[int]:
        """For every ``n``, where the turn of the first ``n`` messages ends: at the next
        user message from ``n`` on (the conversation's length when there is none)."""
        chat = self.inputs.chat
        ends = [len(chat)] * (len(chat) + 1)
        for index in range(len(chat) - 1, -1, -1):
            ends[index] = index if chat[index].get("role") == "user" else ends[index + 1]
        self._turn_ends = ends
        return ends

    @contextlib.contextmanager
    def resuming(self) -> Iterator[None]:
        """The state prefix renders run in: a render's (limits, clock, inputs), with
        ``|tojson`` of the shared inputs remembered across them."""
        limits, inputs = self.template.limits, self.inputs
        saved = render_state.begin(
            render_deadline(limits.max_seconds),
            limits.max_output_chars,
            None,
            inputs.now,
            inputs.made,
        )
        memo = render_state.memo
        render_state.memo = FilterMemo(inputs.made)
        try:
            yield
        finally:
            render_state.memo = memo
            render_state.end(saved)


# A prefix that would run more passes than this again resumes from a watched render of
# its turn, when the turn goes on for as many messages more (PrefixRenders.render)
_PASSES_BACK = 8
# The prefixes the render up to the last answer may miss before it serves one (the first
# prefixes may be ones the template refuses), after which it is not tried again
_ANSWERED_TRIES = 4
# After this many prefixes, a template that resumed less than this share of them stops
# watching its renders (ChatTemplate._resuming_pays)
_TALLY_SEEN, _TALLY_SHARE = 64, 0.25
# A watched render costs about 1.3 renders; resuming a prefix from a small part of one to
# a whole one, as the template goes. Below this many renders' worth of prefixes to render
# (each its share of the conversation), the prefixes are cheaper rendered from the start
# (a short conversation's one or two turns);
# from it up to _WATCHING_ALWAYS, each template tries both ways _TRIALS times at each cost
# in whole renders and keeps the faster (ChatTemplate._worth_watching)
_WATCHING_PAYS = 2.0
_WATCHING_ALWAYS = 8.0
_TRIALS = 5


def _assistant_turns(messages: Sequence[Any]) -> list[int]:
    """The indexes of the assistant's messages."""
    return [
        index
        for index, message in enumerate(messages)
        # (a dict's type first: isinstance of an ABC is slow, and the messages are many)
        if (type(message) is dict or isinstance(message, Mapping))
        and message.get("role") == "assistant"
    ]


def _middle(values: list[float]) -> float:
    """The median (the upper one of an even count)."""
    return sorted(values)[len(values) // 2]


def _prefix_cost(turns: list[int], total: int, add_generation_prompt: bool) -> tuple[float, int]:
    """What rendering the prefixes derived spans need (around the assistant's messages
    ``turns`` of ``total``) from the start costs: in renders of the conversation (each
    prefix its share of the messages), and in render units with the conversation's own
    render (a message each, and one for each render's own cost)."""
    cost, units = 0.0, total + 1
    for index in turns:
        if index:
            cost += index / total  # the prefix before the turn
            units += index + 1
        if index + 1 < total or add_generation_prompt:
            cost += (index + 1) / total  # the prefix up to it (the last is the render)
            units += index + 2
    return cost, units


def _spans_from_shared_inputs(
    prefixes: PrefixRenders, messages: Sequence[Any], turns: list[int]
) -> tuple[Span, ...]:
    """derive_spans_by_prefixes's spans, the prefixes rendered (or resumed) from the inputs
    of the full render instead of fresh copies, with tojson's results on them remembered:
    ``|tojson`` of one of those inputs (a tool schema, a call's arguments) gives the same
    text in every render, so it is computed once. A prefix resumed from the full render is
    kept as the part of its text it shares and the rest (``render_parts``): no prefix
    copies or compares the text they share, and a search of it is done only where its
    answer can change the span (_turn_start).
    """
    inputs, text = prefixes.inputs, prefixes.text
    spans: list[Span] = []
    cursor = 0
    with prefixes.resuming():
        for index in turns:
            message = messages[index]
            head = prefixes.render_parts(index, True) if index else (0, "")
            if head is None:
                continue  # a prefix this template refuses (e.g. it must start with a user turn)
            if index + 1 == len(inputs.chat) and prefixes.flag is False:
                turn: tuple[int, str] | None = (len(text), "")  # the full render's own
            else:
                turn = prefixes.render_parts(index + 1, False)
            if turn is None:
                continue
            content = message.get("content")
            anchor = content.strip() if isinstance(content, str) else ""
            span = _locate_turn(text, head, turn, cursor, anchor)
            if span is not None:
                spans.append(span)
                cursor = span.end
    return tuple(spans)


def _turn_start(text: str, head: tuple[int, str], turn: tuple[int, str]) -> int:
    """Where the assistant's text begins in the render of the conversation up to its turn
    (``turn``), after the render of the conversation before it with a generation prompt
    (``head``); each as the length of the part of ``text`` it starts with and the rest."""
    (head_kept, head_rest), (turn_kept, turn_rest) = head, turn
    shared = min(head_kept, turn_kept)  # both start with text[:shared]; then:
    head_rest = text[shared:head_kept] + head_rest
    turn_rest = text[shared:turn_kept] + turn_rest
    size = shared + len(head_rest)
    if turn_rest.startswith(head_rest):
        return size
    # The generation prompt differs from the turn's opening (a `<think>` the prompt opens, a
    # system text folded into the last user turn): the turn starts after the longest tail
    # of the prompt that the turn repeats, or after what both share, whichever is later
    agreed = shared + common_prefix_length(head_rest, turn_rest)
    if size < 4:
        return agreed
    # A tail the turn repeats only in the text both share ends before `agreed`: what
    # matters is the longest tail it repeats past that text (its tails are repeated there
    # too: found by doubling then halving) and whether a longer one is in that text. The
    # search looks in the turn's rest after the `lead` last characters of the shared text
    # (as many as the longest tail tried may start in: grown with it)
    lead, window = _grown(text, shared, turn_rest, -1, "", 4)
    if not _repeated(window, lead, _tail(text, shared, head_rest, 4)):
        return agreed
    low, probe = 4, 8
    while probe <= size:
        lead, window = _grown(text, shared, turn_rest, lead, window, probe)
        if not _repeated(window, lead, _tail(text, shared, head_rest, probe)):
            break
        low, probe = probe, probe * 2
    high = min(probe - 1, size)
    lead, window = _grown(text, shared, turn_rest, lead, window, high)
    while low < high:
        middle = (low + high + 1) // 2
        if _repeated(window, lead, _tail(text, shared, head_rest, middle)):
            low = middle
        else:
            high = middle - 1
    needle = _tail(text, shared, head_rest, low)
    found = shared - lead + window.rfind(needle) + low  # its last place in the turn
    if found <= agreed or (
        low < size and text.find(_tail(text, shared, head_rest, low + 1), 0, shared) >= 0
    ):
        return agreed  # (the longest is a longer one, in the shared text alone)
    return found


def _tail(text: str, shared: int, head_rest: str, length: int) -> str:
    """The last ``length`` characters of ``text[:shared] + head_rest``."""
    if length <= len(head_rest):
        return head_rest[-length:]
    return text[shared + len(head_rest) - length : shared] + head_rest


def _grown(
    text: str, shared: int, turn_rest: str, lead: int, window: str, length: int
) -> tuple[int, str]:
    """``lead`` and ``window`` (_repeated's), with as much of the shared text as a tail of
    ``length`` may start in (twice that, up to all of it, when it needs more)."""
    if lead >= min(shared, length - 1):
        return lead, window
    lead = min(shared, 2 * length)
    return lead, text[shared - lead : shared] + turn_rest


def _repeated(window: str, lead: int, needle: str) -> bool:
    """Whether ``needle`` is in ``window`` (the ``lead`` last characters of the text two
    renders share, then one's rest) past the shared text: ending in the rest (``lead`` is
    as long as the needle less one, or all of that text)."""
    return window.find(needle, max(0, lead - len(needle) + 1)) >= 0


_SLACK = 64  # how much longer a turn may be in history than as the last turn (two Apriel ids)


def _found_tail(text: str, generated: str, start: int, limit: int, anchor: str) -> int:
    """The length of the longest tail of ``generated`` found in ``text[start:limit]``
    when it holds ``anchor``, else 0."""
    # The tails found are the shortest up to the longest (a tail's own tails are found
    # where it is), and those that hold the anchor the longest down to the one from its
    # last place on: none found holds it unless that one is found
    low, high = 0, len(generated)
    if anchor:
        last = generated.rfind(anchor)
        if last < 0 or text.find(generated[last:], start, limit) < 0:
            return 0
        low = len(generated) - last
    while low < high:
        middle = (low + high + 1) // 2
        if text.find(generated[-middle:], start, limit) >= 0:
            low = middle
        else:
            high = middle - 1
    return low


def _locate_turn(
    text: str,
    head: tuple[int, str],
    turn: tuple[int, str],
    cursor: int,
    anchor: str,
) -> Span | None:
    """The span of the turn rendered by ``turn`` after ``head`` in ``text``, each given as
    how many first characters of ``text`` it is and the rest (_turn_start)."""
    # The turn's generated text is what its render adds after the generation prompt
    at = _turn_start(text, head, turn)
    turn_kept, turn_rest = turn
    generated = (
        text[at:turn_kept] + turn_rest if at < turn_kept else turn_rest[at - turn_kept :]
    ).rstrip()
    if not generated:
        return None
    head_kept, head_rest = head
    end = head_kept + len(head_rest)
    if text.startswith(head_rest, head_kept):  # (the most: the prompt is the turn's opening)
        parted = end
    else:  # where the head parts from the text
        parted = head_kept + common_prefix_length(head_rest, text[head_kept:end])
    start = max(cursor, parted)
    if text.startswith(generated, start):
        return Span(start, start + len(generated))
    # Templates render a past turn differently from the last one (Qwen3 drops the empty
    # thought): keep the longest tail of the turn found near where the turn starts, when it
    # holds the message's own text
    limit = start + len(generated) + _SLACK
    low = _found_tail(text, generated, start, limit, anchor)
    if low:
        found = text.find(generated[-low:], start, limit)
        return Span(max(start, found - (len(generated) - low)), found + low)
    # The turn ends differently in history (gpt-oss: <|end|>, not <|return|>): it ends with
    # the message's own text, or, without one, where the two stop agreeing
    if anchor:
        at = text.find(anchor, start, limit)
        return None if at < 0 else Span(start, at + len(anchor))
    agreed = common_prefix_length(generated, text[start : start + len(generated)])
    return Span(start, start + agreed) if agreed else None
