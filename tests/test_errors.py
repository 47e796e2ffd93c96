"""One exception hierarchy: each failure has its own type, the one a caller catches."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import pytest

import chatcodec
from chatcodec import (
    ChatCodecError,
    ChatTemplate,
    CheckpointError,
    Codec,
    DocstringParsingException,
    RequestError,
    TemplateArgumentError,
    TemplateError,
    TemplateNotFoundError,
    TemplateRaisedError,
    TemplateRuntimeError,
    TemplateSyntaxError,
    TemplateTypeError,
    TemplateUndefinedError,
    TypeHintParsingException,
    UnusedVariableWarning,
    errors,
)

USER = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    ("source", "error_type", "kind"),
    [
        ("{{ raise_exception('roles must alternate') }}", TemplateRaisedError, "TemplateError"),
        ("{{ nothing.at.all }}", TemplateUndefinedError, "UndefinedError"),
        ("{{ messages[0].content + 1 }}", TemplateTypeError, "TypeError"),
        ("{{ 1 // 0 }}", TemplateRuntimeError, "ZeroDivisionError"),
    ],
)
def test_a_template_failing_while_rendering_has_its_own_type(
    source: str, error_type: type[TemplateError], kind: str
) -> None:
    with pytest.raises(error_type) as caught:
        ChatTemplate(source).render(USER)
    assert type(caught.value) is error_type
    assert isinstance(caught.value, TemplateRuntimeError)
    assert (caught.value.stage, caught.value.kind) == ("render", kind)


def test_a_template_that_does_not_compile_is_a_syntax_error() -> None:
    with pytest.raises(TemplateSyntaxError) as caught:
        ChatTemplate("line one\n{% if %}")
    assert (caught.value.stage, caught.value.kind, caught.value.lineno) == (
        "compile",
        "TemplateSyntaxError",
        2,
    )


@pytest.mark.parametrize(
    ("messages", "options", "kind", "words"),
    [
        ([], {}, "ValueError", "empty conversation"),
        (USER, {"add_generation_prompt": True, "continue_final_message": True}, "ValueError", ""),
        ("hello", {}, "TypeError", "list of message dicts"),
        (USER, {"documents": ["not a dict"]}, "TypeError", "Documents"),
        (USER, {"now": "yesterday"}, "ValueError", "aware datetime"),
    ],
)
def test_renders_own_argument_checks_are_request_errors(
    messages: Any, options: dict[str, Any], kind: str, words: str
) -> None:
    with pytest.raises(TemplateArgumentError) as caught:
        ChatTemplate("{{ messages }}").render(messages, **options)
    error = caught.value
    assert isinstance(error, RequestError) and isinstance(error, TemplateError)
    assert isinstance(error, ValueError)  # RequestError is a ValueError, whatever the kind
    assert (error.stage, error.kind) == ("render", kind)
    assert words in str(error)


def test_a_tool_function_without_a_schema_is_a_request_error() -> None:
    def no_docstring(city: str) -> str:
        return city

    with pytest.raises(DocstringParsingException):
        chatcodec.get_json_schema(no_docstring)
    with pytest.raises(TemplateArgumentError) as caught:
        ChatTemplate("{{ tools }}").render(USER, tools=[no_docstring])
    assert caught.value.kind == "DocstringParsingException"
    assert issubclass(TypeHintParsingException, RequestError)


def test_no_template_of_that_name_is_one_type_wherever_it_is_asked_for() -> None:
    codec = Codec({"default": "D", "tool_use": "T"})
    with pytest.raises(TemplateNotFoundError, match="available"):
        Codec({"default": "D"}, template_name="rag")
    with pytest.raises(TemplateNotFoundError, match="available"):
        codec.render(USER, template_name="rag")
    with pytest.raises(TemplateNotFoundError, match="no default"):
        Codec({"a": "A", "b": "B"}).render(USER)
    assert issubclass(TemplateNotFoundError, CheckpointError)
    assert issubclass(TemplateNotFoundError, LookupError)
    with pytest.raises(CheckpointError):
        Codec({})


def test_template_errors_survive_pickling_with_their_type() -> None:
    with pytest.raises(TemplateRaisedError) as caught:
        ChatTemplate("\n{{ raise_exception('no') }}").render(USER)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is TemplateRaisedError
    assert (copy.stage, copy.kind, copy.lineno, str(copy)) == (
        "render",
        "TemplateError",
        2,
        str(caught.value),
    )


def test_every_public_error_is_exported_and_a_chatcodec_error() -> None:
    for name in errors.__all__:
        assert name in chatcodec.__all__
        value = getattr(chatcodec, name)
        assert value is getattr(errors, name)
        if name.endswith("Warning"):
            assert issubclass(value, UserWarning), name
        else:
            assert issubclass(value, ChatCodecError), name


def test_a_keyword_the_template_never_reads_is_named_with_the_closest_option() -> None:
    template = ChatTemplate("{{ messages[0].content }}{% if enable_thinking %}T{% endif %}")
    with pytest.warns(
        UnusedVariableWarning, match="'add_generation_promt'.*'add_generation_prompt'"
    ):
        assert template.render(USER, add_generation_promt=True) == "x"
    with pytest.warns(UnusedVariableWarning, match="'enable_thinkin'.*'enable_thinking'"):
        template.render_with_spans(USER, enable_thinkin=True)


def test_read_keywords_special_tokens_and_conventional_flags_do_not_warn() -> None:
    template = ChatTemplate("{{ bos_token }}{{ messages[0].content }}{{ flavour }}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = template.render(
            USER, flavour="!", bos_token="<s>", eos_token="</s>", enable_thinking=False
        )
    assert text == "<s>x!"
