"""Invariant 5: a chat template is untrusted input.

Every payload below is a template a hostile checkpoint could ship. Each one either fails with
chatcodec's own error of the expected kind and stage, or renders something harmless; and in
every case the caller's data is unchanged, no file is written, no secret is read and no
Python internals reach the output or the error message.
"""

from __future__ import annotations

import copy
import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chatcodec import (
    ChatTemplate,
    Limits,
    TemplateError,
    TemplateLimitError,
    TemplateSecurityError,
)

from .conftest import TEMPLATES, shared_path

SECRET_NAME = "CHATCODEC_SANDBOX_SECRET"
SECRET_VALUE = "s3cr3t-value-that-must-not-leak"

# What an escape would print: module and class reprs, globals dicts, builtins, the secret
LEAK_MARKERS = (
    "<module",
    "<class",
    "__builtins__",
    "__globals__",
    "subprocess",
    "Popen",
    "_io.",
    "environ",
    "Context",
    "object at 0x",
    "<function",
    "<built-in",
    SECRET_VALUE,
)

SECURITY = "security"  # TemplateSecurityError at render
LIMIT = "limit"  # TemplateLimitError at render


def _error(kind: str) -> tuple[str, str]:
    """Any TemplateError at render whose kind is ``kind``."""
    return ("error", kind)


def _renders(text: str) -> tuple[str, str]:
    """A harmless render with exactly this output."""
    return ("renders", text)


# (id, template, expected outcome). `{marker}` is replaced by a path that must never appear.
PAYLOADS: list[tuple[str, str, Any]] = [
    # --- climbing from objects to Python internals ----------------------------------------
    ("str-mro-subclasses", "{{ ''.__class__.__mro__[1].__subclasses__() }}", SECURITY),
    ("list-class-base", "{{ [].__class__.__base__.__subclasses__() }}", SECURITY),
    ("cycler-globals", "{{ cycler.__init__.__globals__.os.system('touch {marker}') }}", SECURITY),
    ("joiner-globals-os", "{{ joiner.__init__.__globals__.os.popen('id').read() }}", SECURITY),
    ("namespace-globals", "{{ namespace.__init__.__globals__['os'] }}", SECURITY),
    ("cycler-instance-class", "{{ cycler(1, 2).__class__.__init__.__globals__ }}", SECURITY),
    ("lipsum-globals", "{{ lipsum.__globals__['os'].environ }}", SECURITY),
    ("raise-exception-globals", "{{ raise_exception.__globals__.json }}", SECURITY),
    ("strftime-now-globals", "{{ strftime_now.__globals__['__builtins__'] }}", SECURITY),
    ("dict-call-globals", "{{ dict.__call__.__globals__ }}", SECURITY),
    ("dict-class", "{{ dict.__class__.__mro__ }}", SECURITY),
    ("self-context", "{{ self._TemplateReference__context.environment }}", SECURITY),
    ("self-dict", "{{ self.__dict__ }}", _renders("")),
    (
        "loop-class",
        "{% for m in messages %}{{ loop.__class__.__init__ }}{% endfor %}",
        _renders(""),
    ),
    ("messages-class", "{{ messages.__class__.__base__ }}", SECURITY),
    ("tools-attr-filter", "{{ (tools|attr('__class__')).__mro__ }}", SECURITY),
    ("attr-filter-plain", "{{ messages|attr('__len__') }}", _renders("")),
    ("range-self", "{{ range.__self__.__import__('os') }}", _error("UndefinedError")),
    (
        "map-attribute-class",
        "{{ messages|map(attribute='__class__')|list }}",
        _renders("[Undefined, Undefined]"),
    ),
    ("map-attr-filter", "{{ messages|map('attr', '__init__')|first }}", _renders("")),
    ("groupby-class", "{{ messages|groupby('__class__') }}", SECURITY),
    ("sum-attribute-class", "{{ messages|sum(attribute='__class__') }}", SECURITY),
    ("subscript-dunder", "{{ ''['__class__']['__mro__'] }}", SECURITY),
    ("getitem-method", "{{ messages.__getitem__(0) }}", SECURITY),
    ("undefined-climb", "{{ nothing_here.__class__.__mro__ }}", SECURITY),
    # --- format-string attacks --------------------------------------------------------------
    ("str-format-class", "{{ '{0.__class__.__mro__}'.format(messages) }}", SECURITY),
    ("str-format-globals", "{{ '{0.__globals__}'.format(raise_exception) }}", _renders("")),
    ("format-filter-globals", "{{ '%s'|format(raise_exception.__globals__) }}", _renders("")),
    ("printf-unsafe-attr", "{{ '%s' % cycler.__init__ }}", _renders("")),
    ("format-map-attr", "{{ '{x.__class__.__base__}'.format_map({'x': 1}) }}", SECURITY),
    (
        "format-through-loop-item",
        "{% for f in ['{0.__class__.__mro__}'.format] * 2 %}"
        "{{ loop.nextitem(messages) if loop.first else loop.previtem(messages) }}{% endfor %}",
        SECURITY,
    ),
    ("format-map-index", "{{ '{m[0].__class__}'.format_map({'m': messages}) }}", _renders("")),
    # --- mutation of the caller's data -----------------------------------------------------
    ("messages-append", "{{ messages.append({'role': 'system'}) }}", SECURITY),
    ("message-update", "{{ messages[0].update({'content': 'pwned'}) }}", SECURITY),
    ("tools-pop", "{% set _ = tools.pop() %}{{ tools|length }}", SECURITY),
    ("documents-clear", "{% set _ = documents.clear() %}", SECURITY),
    ("kwargs-setdefault", "{{ custom.setdefault('x', 1) }}", SECURITY),
    ("kwargs-list-extend", "{{ custom['items'].extend([9]) }}", SECURITY),
    ("namespace-underscore", "{% set ns = namespace(_x=1) %}{{ ns }}", SECURITY),
    ("namespace-set-underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", SECURITY),
    ("namespace-dict", "{% set ns = namespace() %}{{ ns.__dict__ }}", _renders("")),
    (
        "namespace-setitem",
        "{% set ns = namespace() %}{{ ns.__setitem__('x', 1) }}",
        _error("UndefinedError"),
    ),
    (
        "namespace-init-again",
        "{% set ns = namespace(a=1) %}{{ ns.__init__(b=2) }}",
        _error("UndefinedError"),
    ),
    (
        "namespace-holds-messages",
        "{% set ns = namespace(m=messages) %}{{ ns.m.append(1) }}",
        SECURITY,
    ),
    (
        "set-loop-var",
        "{% for m in messages %}{% set m = {'role': 'x'} %}{% endfor %}{{ messages[0].role }}",
        _renders("user"),
    ),
    ("dict-global-copy", "{% set d = dict(messages[0]) %}{{ d.update(role='x') }}", SECURITY),
    # --- resource bombs ---------------------------------------------------------------------
    ("str-times-huge", "{{ 'a' * 10**10 }}", LIMIT),
    ("braces-times-huge", "{{ '{}' * 10**9 }}", LIMIT),
    ("range-huge", "{{ range(10**9)|list|length }}", _error("OverflowError")),
    ("range-join-huge", "{{ range(10**8)|join(',') }}", _error("OverflowError")),
    ("center-huge", "{{ 'x'.center(10**10) }}", LIMIT),
    ("center-below-max-int", "{{ 'x'.ljust(999999999) }}", LIMIT),
    ("bytes-center", "{{ 'x'.encode().center(999999999) }}", LIMIT),
    ("center-filter", "{{ 'x'|center(999999999) }}", LIMIT),
    ("format-width", "{{ '{:>99999999999}'.format(1) }}", LIMIT),
    ("format-nested-width", "{{ '{:>{w}}'.format(1, w=999999999) }}", LIMIT),
    ("format-precision", "{{ '{:.999999999f}'.format(1.5) }}", LIMIT),
    ("printf-width", "{{ '%099999999999d' % 1 }}", LIMIT),
    ("printf-star-width", "{{ '%*d' % (999999999, 1) }}", LIMIT),
    ("format-filter-width", "{{ '%0999999999d'|format(1) }}", LIMIT),
    ("printf-repeat-map", "{{ ('%(a)s' * 10000000) % {'a': 'xxxxxxxxxx'} }}", LIMIT),
    ("indent-huge", "{{ 'a'|indent(width=10**10) }}", LIMIT),
    ("indent-many-lines", "{{ ('\\n' * 100000)|indent(width=1000) }}", LIMIT),
    ("expandtabs", "{{ ('\\t' * 1000).expandtabs(1000000) }}", LIMIT),
    ("wordwrap-huge-width", "{{ 'a b'|wordwrap(10**10) }}", _renders("a b")),
    ("wordwrap-long-break", "{{ ('a ' * 10000)|wordwrap(1, wrapstring='x' * 10**6) }}", LIMIT),
    ("replace-method", "{{ ('a' * 100000).replace('a', 'b' * 100000) }}", LIMIT),
    (
        "replace-doubling-loop",
        "{% set ns = namespace(s='aa') %}{% for i in range(40) %}"
        "{% set ns.s = ns.s|replace('a', 'aaaa') %}{% endfor %}{{ ns.s|length }}",
        LIMIT,
    ),
    (
        "concat-doubling-loop",
        "{% set ns = namespace(s='x') %}{% for i in range(100) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        LIMIT,
    ),
    (
        "list-doubling-loop",
        "{% set ns = namespace(l=[1]) %}{% for i in range(100) %}"
        "{% set ns.l = ns.l + ns.l %}{% endfor %}",
        LIMIT,
    ),
    ("join-long-separator", "{{ range(100000)|join('x' * 100000) }}", LIMIT),
    ("join-generator", "{{ range(100000)|map('string')|join('x' * 100000) }}", LIMIT),
    ("join-big-items", "{{ (['x' * 1000000] * 1000)|join }}", LIMIT),
    ("str-join-method", "{{ ('x' * 100000).join(['a'] * 100000) }}", LIMIT),
    ("translate-table", "{{ ('ab' * 1000).translate({97: 'x' * 1000000}) }}", LIMIT),
    ("urlize-target", "{{ ('a.com ' * 10000)|urlize(target='x' * 100000) }}", LIMIT),
    ("tojson-indent", "{{ tools|tojson(indent=999999999) }}", LIMIT),
    ("tojson-deep-indent", "{{ ([[[[1]]]] * 10000)|tojson(indent=100000) }}", LIMIT),
    ("sum-lists", "{{ ([[1] * 100000] * 100000)|sum(start=[])|length }}", LIMIT),
    (
        "set-block-copies",
        "{% set s = 'x' * 60000000 %}{% for i in range(100) %}"
        "{% set b %}{{ s }}{{ s }}{% endset %}{% endfor %}",
        LIMIT,
    ),
    ("power-tower", "{{ (10**4096)**4096 }}", LIMIT),
    ("power-huge", "{{ 2 ** 100000000 }}", LIMIT),
    ("left-assoc-power", "{{ 10**10**10 }}", _renders("1" + "0" * 100)),
    (
        "squaring-loop",
        "{% set ns = namespace(n=3) %}{% for i in range(40) %}"
        "{% set ns.n = ns.n * ns.n %}{% endfor %}",
        LIMIT,
    ),
    ("lipsum-huge", "{{ lipsum(n=10**8) }}", LIMIT),
    ("recursive-macro", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", LIMIT),
    (
        "recursive-loop",
        "{% for x in [[1]] recursive %}{{ loop([[1]]) }}{% endfor %}",
        LIMIT,
    ),
    ("division-by-zero", "{{ 1 / 0 }}", _error("ZeroDivisionError")),
    ("type-error", "{{ 'a' + 1 }}", _error("TypeError")),
    ("undefined-error", "{{ nothing_here.foo }}", _error("UndefinedError")),
    ("int-too-long-to-print", "{{ 10**4000 * 10**4000 }}", _error("ValueError")),
]

SLOW_PAYLOADS: list[tuple[str, str]] = [
    (
        "nested-range-loops",
        "{% for a in range(100000) %}{% for b in range(100000) %}"
        "{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}",
    ),
    (
        "nested-list-loops",
        "{% set big = range(100000)|list %}{% for a in big %}{% for b in big %}"
        "{% for c in big %}{% endfor %}{% endfor %}{% endfor %}",
    ),
    (
        "compare-big-strings",
        "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}"
        "{% if s == s ~ '' %}{% endif %}{% endfor %}",
    ),
    ("format-many-fields", "{{ ('{0}' * 1500000).format('xxxxxxxxxx') }}"),  # 15M chars
    ("list-sum-loop", "{% for i in range(100000) %}{{ range(100000)|list|sum }}{% endfor %}"),
]


@pytest.fixture
def request_data() -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "documents": [{"title": "doc", "text": "body"}],
        "custom": {"items": [1, 2], "flag": True},
    }


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    return SECRET_VALUE


def _render(template: ChatTemplate, data: dict[str, Any]) -> str:
    # `custom` only to the payloads that read it: passing it to the others would warn
    extra = {"custom": data["custom"]} if "custom" in template.variables else {}
    return template.render(
        data["messages"], tools=data["tools"], documents=data["documents"], **extra
    )


def _assert_no_leak(text: str) -> None:
    for marker in LEAK_MARKERS:
        assert marker not in text, f"{marker!r} leaked: {text[:300]!r}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [pytest.param(source, expected, id=name) for name, source, expected in PAYLOADS],
)
def test_attack_payload(
    source: str, expected: Any, request_data: dict[str, Any], secret: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    template = ChatTemplate(source.replace("{marker}", str(marker)), limits=Limits(max_seconds=5))
    before = copy.deepcopy(request_data)
    started = time.monotonic()
    if isinstance(expected, tuple) and expected[0] == "renders":
        text = _render(template, request_data)
        assert text == expected[1]
        _assert_no_leak(text)
    else:
        error_type = {SECURITY: TemplateSecurityError, LIMIT: TemplateLimitError}.get(
            expected, TemplateError
        )
        with pytest.raises(error_type) as caught:
            _render(template, request_data)
        error = caught.value
        assert error.stage == "render"
        if isinstance(expected, tuple):
            assert error.kind == expected[1]
        elif expected == SECURITY:
            assert error.kind == "SecurityError"
            assert "unsafe" in str(error) or "underscore" in str(error)
        assert str(error), "every error carries a message"
        assert SECRET_VALUE not in str(error)
    assert time.monotonic() - started < 5, "a refused payload fails fast, before allocating"
    assert request_data == before, "the caller's data is never mutated"
    assert not marker.exists(), "no file was written"
    assert os.environ[SECRET_NAME] == secret


def test_payload_table_is_large_and_distinct() -> None:
    names = [name for name, _, _ in PAYLOADS]
    sources = [source for _, source, _ in PAYLOADS]
    assert len(set(names)) == len(names)
    assert len(set(sources)) == len(sources)
    assert len(PAYLOADS) >= 30


@pytest.mark.parametrize(
    "source", [pytest.param(source, id=name) for name, source in SLOW_PAYLOADS]
)
def test_time_limit_stops_slow_templates(source: str, request_data: dict[str, Any]) -> None:
    template = ChatTemplate(source, limits=Limits(max_seconds=0.2))
    started = time.monotonic()
    with pytest.raises(TemplateLimitError) as caught:
        _render(template, request_data)
    elapsed = time.monotonic() - started
    assert caught.value.stage == "render"
    assert "time limit" in str(caught.value)
    assert elapsed < 5, f"a 0.2 s budget took {elapsed:.1f} s to enforce"


def test_output_limit_stops_big_output(request_data: dict[str, Any]) -> None:
    source = "{% for i in range(100000) %}xxxxxxxxxx{% endfor %}"
    with pytest.raises(TemplateLimitError) as caught:
        _render(ChatTemplate(source, limits=Limits(max_output_chars=1000)), request_data)
    assert caught.value.stage == "render"
    assert "1000" in str(caught.value)
    # the same template is fine under the defaults
    assert len(_render(ChatTemplate(source), request_data)) == 1_000_000


def test_output_limit_bounds_each_built_value(request_data: dict[str, Any]) -> None:
    limits = Limits(max_output_chars=1000)
    for source in (
        "{% set x = 'a' * 5000 %}",
        "{% set x = messages[0].content|center(5000) %}",
        "{{ 'a' * 999 }}",
    ):
        template = ChatTemplate(source, limits=limits)
        if "999" in source:
            assert _render(template, request_data) == "a" * 999
        else:
            with pytest.raises(TemplateLimitError):
                _render(template, request_data)


@pytest.mark.parametrize(
    "call",
    [
        "(1).to_bytes(20000000, 'little')",
        "(1).to_bytes(length=20000000, byteorder='big')",
        "true.to_bytes(20000000, 'little')",
    ],
)
def test_int_to_bytes_is_refused_before_allocating(call: str, request_data: dict[str, Any]) -> None:
    # to_bytes fills every byte it is asked for: a 3,000,000,000-byte call took 2.9 GB before
    # the size of the value it built was checked. Now the length is checked first.
    template = ChatTemplate("{{ " + call + " }}", limits=Limits(max_output_chars=1000))
    tracemalloc.start()
    try:
        with pytest.raises(TemplateLimitError) as caught:
            _render(template, request_data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, f"the render allocated {peak} bytes before refusing"
    assert caught.value.stage == "render"
    assert caught.value.kind == "LimitExceeded"
    assert "made bytes past the output limit" in str(caught.value)


def test_int_to_bytes_within_the_limit_renders_as_python(request_data: dict[str, Any]) -> None:
    limits = Limits(max_output_chars=1000)
    source = "{{ (258).to_bytes(2, 'big') }} {{ (1).to_bytes(1000, 'little')|length }}"
    assert _render(ChatTemplate(source, limits=limits), request_data) == "b'\\x01\\x02' 1000"
    with pytest.raises(TemplateLimitError):
        _render(ChatTemplate("{{ (1).to_bytes(1001, 'little') }}", limits=limits), request_data)


def test_limits_do_not_leak_between_templates(request_data: dict[str, Any]) -> None:
    tight = ChatTemplate("{{ 'a' * 2000 }}", limits=Limits(max_output_chars=1000))
    loose = ChatTemplate("{{ 'a' * 2000 }}")
    with pytest.raises(TemplateLimitError):
        _render(tight, request_data)
    assert _render(loose, request_data) == "a" * 2000


@pytest.mark.parametrize(
    ("source", "error_type", "kind"),
    [
        pytest.param("{% for x in y %}", TemplateError, "TemplateSyntaxError", id="unclosed-for"),
        pytest.param("{{ 1 +* 2 }}", TemplateError, "TemplateSyntaxError", id="bad-operator"),
        pytest.param("{% macro %}", TemplateError, "TemplateSyntaxError", id="nameless-macro"),
        pytest.param(
            "{% for m in messages %}{% set loop = 1 %}{% endfor %}",
            TemplateError,
            "TemplateAssertionError",
            id="assign-loop-variable",
        ),
        pytest.param("{% import 'os' as os %}{{ os }}", None, None, id="import-compiles"),
        pytest.param(
            "{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}",
            TemplateLimitError,
            "RecursionError",
            id="deep-parentheses",
        ),
        pytest.param(
            "{% if x %}" * 5000 + "{% endif %}" * 5000,
            TemplateLimitError,
            "RecursionError",
            id="deep-if-blocks",
        ),
        pytest.param(
            "{{ [" * 3000 + "]" * 3000 + " }}",
            TemplateLimitError,
            "RecursionError",
            id="deep-lists",
        ),
    ],
)
def test_compile_stage_failures(source: str, error_type: Any, kind: str | None) -> None:
    if error_type is None:  # compiles, and fails at render: there is no loader to import from
        with pytest.raises(TemplateError) as caught:
            ChatTemplate(source).render([{"role": "user", "content": "x"}])
        assert caught.value.stage == "render"
        return
    with pytest.raises(error_type) as caught:
        ChatTemplate(source)
    assert caught.value.stage == "compile"
    assert caught.value.kind == kind
    assert str(caught.value)


def test_non_string_source_is_a_compile_error() -> None:
    with pytest.raises(TemplateError) as caught:
        ChatTemplate(b"{{ x }}")  # type: ignore[arg-type]
    assert caught.value.stage == "compile"


def test_self_referencing_input_is_a_template_error() -> None:
    message: dict[str, Any] = {"role": "user", "content": "x"}
    message["self"] = message
    with pytest.raises(TemplateError) as caught:
        ChatTemplate("{{ messages }}").render([message])
    assert caught.value.stage == "render"
    assert caught.value.kind == "RecursionError"


def test_template_sees_a_copy_not_the_callers_objects(request_data: dict[str, Any]) -> None:
    # even where the template may legitimately build new values, the inputs stay as they were
    source = (
        "{% set ns = namespace(seen=[]) %}{% for m in messages %}"
        "{% set ns.seen = ns.seen + [m] %}{% endfor %}"
        "{% set merged = dict(messages[0], content='changed') %}"
        "{{ merged.content }} {{ ns.seen|length }} {{ messages[0].content }}"
    )
    before = copy.deepcopy(request_data)
    assert _render(ChatTemplate(source), request_data) == "changed 2 Hello"
    assert request_data == before


def test_only_chatcodec_errors_escape(request_data: dict[str, Any]) -> None:
    sources = [name_source[1] for name_source in PAYLOADS] + [s for _, s in SLOW_PAYLOADS]
    for source in sources:
        template = ChatTemplate(source, limits=Limits(max_seconds=0.2))
        try:
            _render(template, request_data)
        except TemplateError:
            pass  # chatcodec's own; any other exception type fails the test


def _long_conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn}: " + "why? " * 50})
        messages.append({"role": "assistant", "content": f"Answer {turn}: " + "because. " * 50})
    messages.append({"role": "user", "content": "One more thing."})
    return messages


def test_default_limits_render_every_real_template() -> None:
    folder = shared_path("chat_templates")
    names = sorted(path.name for path in folder.glob("*.jinja"))
    assert names, f"no templates in {TEMPLATES}"
    messages = _long_conversation(200)
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    rendered = 0
    for name in names:
        source = (folder / name).read_text(encoding="utf-8")
        template = ChatTemplate(source, name=name, special_tokens=tokens)
        try:
            text = template.render(messages, add_generation_prompt=True)
        except (TemplateLimitError, TemplateSecurityError) as exc:  # the sandbox got in the way
            pytest.fail(f"{name}: the default limits refused a real template: {exc}")
        except TemplateError:
            continue  # the template's own refusal of this conversation (e.g. no system role)
        assert "Question 199" in text
        rendered += 1
    assert rendered >= len(names) * 9 // 10


# --- bounds that hold inside one filter or one C call ------------------------------------
# Each class of payload below once ran far past the time limit, or allocated gigabytes before
# any check, inside a single filter or C call. Rendered with small limits, each must stop
# with TemplateLimitError (never a timing assertion: how long they take is measured by
# benchmarks/sandbox.py).

TIGHT = Limits(max_seconds=0.5, max_output_chars=1_000_000)
S = "{% set s = 'x' * 100000 %}"  # 100,000 chars: 1,000 references print 100 MB
BIG = "{% set big = [1] * 1000000 %}"

BOUND_PAYLOADS: list[tuple[str, str]] = [
    # bytes grow like strings
    ("bytes-times", "{{ 'x'.encode() * 2000000000 }}"),
    ("bytes-printf-width", "{{ '%0999999999d'.encode() % 1 }}"),
    ("bytes-printf-args", "{{ ('%s'.encode() * 100) % (('x'.encode() * 100000,) * 100) }}"),
    (
        "bytes-doubling",
        "{% set ns = namespace(b='x'.encode()) %}{% for i in range(100) %}"
        "{% set ns.b = ns.b + ns.b %}{% endfor %}",
    ),
    ("bytes-replace", "{{ ('x'.encode() * 1000).replace('x'.encode(), 'y'.encode() * 100000) }}"),
    ("bytes-join", "{{ ('x'.encode() * 100000).join(['a'.encode()] * 100000) }}"),
    ("bytes-center", "{{ 'x'.encode().rjust(999999999) }}"),
    # loops inside filters meet the deadline
    ("map-sum", BIG + "{{ ([big] * 1000)|map('sum')|list|length }}"),
    ("map-abs", BIG + "{% for i in range(100) %}{{ big|map('abs')|list|length }}{% endfor %}"),
    (
        "map-attribute",
        BIG + "{% for i in range(100) %}{{ big|map(attribute='x')|list|length }}{% endfor %}",
    ),
    ("select", BIG + "{% for i in range(100) %}{{ big|select('odd')|list|length }}{% endfor %}"),
    ("reject-in", BIG + "{{ ([1] * 100000)|reject('in', big + [2])|list|length }}"),
    ("sum-lists-quadratic", "{{ ([[1] * 10] * 100000)|sum(start=[])|length }}"),
    ("unique-lower", "{% set s = 'X' * 500000 %}{{ ([s] * 10000)|unique|list|length }}"),
    ("max-lower", "{% set s = 'X' * 500000 %}{{ ([s] * 10000)|max|length }}"),
    ("batch-big", BIG + "{% for i in range(100) %}{{ big|batch(1)|list|length }}{% endfor %}"),
    ("wordwrap-long-word", "{{ ('x' * 1000000)|wordwrap(1) }}"),
    # one call that would expand shared references before any check
    ("print-shared", S + "{{ [s] * 1000 }}"),
    ("string-filter-shared", S + "{{ ([s] * 1000)|string|length }}"),
    ("concat-shared", S + "{{ 'a' ~ [s] * 1000 }}"),
    ("trim-shared", S + "{{ ([s] * 1000)|trim|length }}"),
    ("tojson-shared", S + "{{ ([s] * 1000)|tojson }}"),
    ("tojson-shared-dict", S + "{{ dict(a=[s] * 1000)|tojson|length }}"),
    ("pprint-shared", S + "{{ ([s] * 1000)|pprint|length }}"),
    ("sort-lower-shared", S + "{{ ([s] * 1000)|sort|length }}"),
    ("dictsort-shared", S + "{{ dict.fromkeys(range(1000), s)|dictsort(by='value')|length }}"),
    ("printf-shared", S + "{{ '%s' % ([s] * 1000,) }}"),
    ("printf-map-shared", S + "{{ '%(a)s' % {'a': [s] * 1000} }}"),
    ("format-shared", S + "{{ '{0}'.format([s] * 1000) }}"),
    ("join-shared-lists", S + "{{ ([[s] * 10] * 100)|join }}"),
    ("raise-shared", S + "{{ raise_exception([s] * 1000) }}"),
    (
        "nested-doubling",
        S + "{% set a = [s, s] %}{% set b = [a, a] %}{% set c = [b, b] %}{% set d = [c, c] %}"
        "{% set e = [d, d] %}{% set f = [e, e] %}{% set g = [f, f] %}{{ g }}",
    ),
    ("namespace-shared", S + "{% set ns = namespace(l=[s] * 1000) %}{{ ns }}"),
    ("dict-view-shared", S + "{{ dict(a=[s] * 1000).values() }}"),
    ("strftime-expand", "{{ strftime_now('%c' * 400000) }}"),
    ("slice-parts", "{{ [1]|slice(10**8)|list|length }}"),
    ("batch-fill", "{{ [1]|batch(10**9, 'x')|list|length }}"),
    ("lipsum-words", "{{ lipsum(1000, max=10000) }}"),
]

# Pure-Python filters that cannot be run in pieces are capped per call; the output limit is
# the default here, so that the cap, not the output limit, is what stops them
CAPPED_PAYLOADS: list[tuple[str, str]] = [
    ("sort-attribute-items", "{{ ([{'a': 1}] * 1000000)|sort(attribute='a')|length }}"),
    ("groupby-items", "{{ ([{'a': 1}] * 1000000)|groupby('a')|length }}"),
    (
        "dictsort-items",
        "{{ dict.fromkeys((range(100000)|list) + (range(100000, 300000, 2)|list)"
        " + (range(300001, 500000, 2)|list))|dictsort|length }}",
    ),
    ("pprint-values", "{{ ([[1]] * 70000)|pprint|length }}"),
    ("tojson-indent-values", "{{ ([[1, 2]] * 100000)|tojson(indent=1)|length }}"),
    ("wordwrap-long-line", "{{ ('ab ' * 400000)|wordwrap(79)|length }}"),
]


@pytest.mark.parametrize(
    "source", [pytest.param(source, id=name) for name, source in BOUND_PAYLOADS]
)
def test_bounds_hold_inside_one_call(source: str, request_data: dict[str, Any]) -> None:
    with pytest.raises(TemplateLimitError) as caught:
        _render(ChatTemplate(source, limits=TIGHT), request_data)
    assert caught.value.stage == "render"
    assert caught.value.kind == "LimitExceeded"
    assert len(str(caught.value)) < 500


@pytest.mark.parametrize(
    "source", [pytest.param(source, id=name) for name, source in CAPPED_PAYLOADS]
)
def test_pure_python_filters_are_capped(source: str, request_data: dict[str, Any]) -> None:
    with pytest.raises(TemplateLimitError) as caught:
        _render(ChatTemplate(source, limits=Limits(max_seconds=5)), request_data)
    assert "pure-Python" in str(caught.value)


# Codecs, Markup methods and filters that loop in Python inside one call: each payload is
# just past its cap (small inputs, small limits), and must be refused before the call runs
SMALL = Limits(max_seconds=5, max_output_chars=100_000)
_LONG_NAME = chr(0x1FBA9)  # its `\\N{...}` escape is 92 chars long
UNINTERRUPTIBLE_PAYLOADS: list[tuple[str, str, Limits, str]] = [
    # punycode is quadratic in distinct characters; idna runs it per label
    ("punycode-encode", "{{ ('\u4e00' * 513).encode('punycode') }}", SMALL, "limited to 512"),
    ("punycode-decode", "{{ ('a-' * 257).encode().decode('punycode') }}", SMALL, "limited to 512"),
    ("idna-encode", "{{ ('a.' * 257).encode('idna') }}", SMALL, "limited to 512"),
    ("idna-decode", "{{ ('a.' * 257).encode().decode('idna') }}", SMALL, "limited to 512"),
    # Markup.striptags copies the text once per tag: 20,000 tags in 60,000 chars
    ("striptags-filter", "{{ ('<a>' * 20000)|striptags }}", SMALL, "chars copied"),
    ("striptags-method", "{{ (('<a>' * 20000)|safe).striptags() }}", SMALL, "chars copied"),
    ("striptags-entities", "{{ ('&amp;' * 65537)|striptags }}", Limits(), "limited to 65536"),
    # Markup's methods loop in Python over parts, lines, entities, items and fields
    ("markup-split", "{{ ((',' * 65536)|safe).split(',') }}", SMALL, "limited to 65536"),
    ("markup-splitlines", "{{ (('\n' * 65537)|safe).splitlines() }}", SMALL, "limited to 65536"),
    ("markup-unescape", "{{ (('&' * 65537)|safe).unescape() }}", SMALL, "limited to 65536"),
    ("markup-join", "{{ (''|safe).join(['a'] * 65537) }}", SMALL, "limited to 65536"),
    ("markup-printf", "{{ (('%s' * 32769)|safe) % (('a',) * 32769) }}", SMALL, "limited to 65536"),
    ("markup-indent", "{{ ('\n' * 65537)|safe|indent(width='') }}", SMALL, "limited to 65536"),
    # |indent goes line by line in Python
    (
        "indent-lines",
        "{{ ('\n' * 1048576)|indent(width='') }}",
        Limits(max_seconds=5, max_output_chars=2_000_000),
        "limited to 1048576",
    ),
]


@pytest.mark.parametrize(
    ("source", "limits", "message"),
    [
        pytest.param(source, limits, message, id=name)
        for name, source, limits, message in UNINTERRUPTIBLE_PAYLOADS
    ],
)
def test_uninterruptible_calls_are_capped(
    source: str, limits: Limits, message: str, request_data: dict[str, Any]
) -> None:
    with pytest.raises(TemplateLimitError) as caught:
        _render(ChatTemplate(source, limits=limits), request_data)
    assert caught.value.kind == "LimitExceeded"
    assert "pure-Python" in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "call",
    [
        "('" + _LONG_NAME + "' * 100000).encode('ascii', 'namereplace')",
        "('\\x00' * 100000).encode('unicode_escape')",
        "('\\x00' * 100000).encode('utf-32')",
        "('\u00e9' * 50000).encode().decode('ascii', 'backslashreplace')",
    ],
)
def test_codec_growth_is_refused_before_allocating(call: str, request_data: dict[str, Any]) -> None:
    # namereplace writes 92 chars for some characters, unicode_escape 4 to 10 bytes for each:
    # the whole output was built before its size was checked (9.2 MB here, 1.4 GB for a
    # string at the default limit). Now it is measured in pieces first.
    template = ChatTemplate("{{ " + call + " }}", limits=SMALL)
    tracemalloc.start()
    try:
        with pytest.raises(TemplateLimitError) as caught:
            _render(template, request_data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, f"the render allocated {peak} bytes before refusing"
    assert "encoded or decoded text past the output limit" in str(caught.value)


def test_bytes_hex_is_refused_before_allocating(request_data: dict[str, Any]) -> None:
    # `data.hex('-')` writes 3 chars per byte: 300,000 here, refused before they are written
    template = ChatTemplate("{{ (('x' * 4000).encode() * 25).hex('-') }}", limits=SMALL)
    tracemalloc.start()
    try:
        with pytest.raises(TemplateLimitError) as caught:
            _render(template, request_data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 300_000, f"the render allocated {peak} bytes before refusing"
    assert "wrote bytes as hex past the output limit" in str(caught.value)


MEASURED = Limits(max_seconds=5, max_output_chars=1_000_000)
# 63,000 chars: coded in 4,096-char pieces when an error handler is named
_MIXED = "münchen.例え.com \x00 \U0010ffff\\ \u00e9" * 3000
_CODED = [
    ("encode", "ascii", "namereplace"),
    ("encode", "ascii", "backslashreplace"),
    ("encode", "ascii", "xmlcharrefreplace"),
    ("encode", "latin-1", "replace"),
    ("encode", "cp1252", "ignore"),
    ("encode", "shift_jis", "namereplace"),
    ("encode", "iso2022_jp", "backslashreplace"),
    ("encode", "utf-16", "strict"),
    ("encode", "utf-32", "backslashreplace"),
    ("encode", "utf-8-sig", "strict"),
    ("encode", "unicode_escape", "strict"),
    ("decode", "ascii", "backslashreplace"),
    ("decode", "utf-8", "strict"),
    ("decode", "cp1252", "replace"),
    ("decode", "utf-16-le", "surrogatepass"),
    ("decode", "shift_jis", "replace"),
    ("decode", "utf-16-le", "replace"),
    ("decode", "utf-8-sig", "replace"),
]
# these run whole (their incremental coders give another output): refused past the limit
_WHOLE = [("encode", "utf-7", "strict"), ("decode", "utf-16", "replace")]


@pytest.mark.parametrize(("way", "encoding", "errors"), _CODED + _WHOLE)
def test_codecs_in_pieces_give_pythons_results(way: str, encoding: str, errors: str) -> None:
    # the template compares its result with Python's (as latin-1 text, for bytes)
    if way == "encode":
        want = _MIXED.encode(encoding, errors).decode("latin-1")
        call = f"text.encode('{encoding}', '{errors}').decode('latin-1')"
    else:
        want = _MIXED.encode("utf-8").decode(encoding, errors)
        call = f"text.encode('utf-8').decode('{encoding}', '{errors}')"
    # (over 600,000 / 10 chars: even a strict call is coded in pieces)
    template = ChatTemplate("{{ " + call + " == want }}", limits=Limits(10, 600_000))
    messages = [{"role": "user", "content": "x"}]
    if (way, encoding, errors) in _WHOLE:
        tight = ChatTemplate("{{ " + call + " == want }}", limits=Limits(10, 300_000))
        with pytest.raises(TemplateLimitError):
            tight.render(messages, text=_MIXED, want=want)
        template = ChatTemplate("{{ " + call + " == want }}", limits=Limits(10, 4_000_000))
    assert template.render(messages, text=_MIXED, want=want) == "True"


def test_codecs_below_their_bounds_give_pythons_results(request_data: dict[str, Any]) -> None:
    text = "münchen.例え.com " * 30
    calls = {
        "('" + text[:100] + "').encode('idna')": text[:100].encode("idna"),
        "('" + "ü例" * 200 + "').encode('punycode')": ("ü例" * 200).encode("punycode"),
        "('a-' * 256).encode().decode('punycode')": ("a-" * 256).encode().decode("punycode"),
        "('" + text + "' * 100).encode('unicode_escape')": (text * 100).encode("unicode_escape"),
        "('" + text + "' * 100).encode('utf-16')": (text * 100).encode("utf-16"),
        "('" + text + "' * 100).encode('utf-7')": (text * 100).encode("utf-7"),
        "('" + text + "' * 100).encode('ascii', 'namereplace')": (text * 100).encode(
            "ascii", "namereplace"
        ),
        "('" + text + "' * 100).encode().decode('ascii', 'backslashreplace')": (
            (text * 100).encode().decode("ascii", "backslashreplace")
        ),
        "('" + text + "' * 100).encode().decode('utf-8')": text * 100,
    }
    for call, want in calls.items():
        # over 1,000,000 / 92 chars: the output is measured in pieces before the call
        template = ChatTemplate("{{ " + call + " }}", limits=MEASURED)
        assert _render(template, request_data) == str(want), call
    failing = ChatTemplate("{{ ('ab' * 20000 ~ '\u00e9').encode('ascii') }}", limits=SMALL)
    with pytest.raises(TemplateError) as caught:
        _render(failing, request_data)
    assert "position 40000" in str(caught.value)  # the call's own error, as Python raises it


def test_undefined_error_shows_a_huge_key_cut_short(request_data: dict[str, Any]) -> None:
    source = S + "{{ messages[[s] * 1000].x }}"
    with pytest.raises(TemplateError) as caught:
        _render(ChatTemplate(source, limits=TIGHT), request_data)
    assert caught.value.kind == "UndefinedError"
    assert "list object has no element ['xxx" in str(caught.value)
    assert len(str(caught.value)) < 1000


# Below the limits, the guarded filters give exactly jinja's results: the same sandbox,
# unguarded, renders the reference
_REFERENCE = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
_ITEMS = "{% set items = range(40)|map('string')|list %}{% set dicts = items|map('int')|list %}"
SAME_AS_JINJA: list[str] = [
    "{{ items|map('upper')|list }}",
    "{{ items|map('int')|select('odd')|list }}",
    "{{ items|reject('in', ['1', '2'])|list }}",
    "{{ ([{'a': 2}, {'a': 1}] * 20)|selectattr('a', 'odd')|list }}",
    "{{ ([{'a': 2}, {'a': 1}] * 20)|rejectattr('a', 'odd')|list }}",
    "{{ (items + items)|unique|list }}",
    "{{ dicts|sum }} {{ dicts|sum(start=10) }} {{ [[1], [2]]|sum(start=[]) }}",
    "{{ items|min }} {{ items|max }} {{ dicts|max }} {{ ['B', 'a']|min(case_sensitive=true) }}",
    "{{ items|batch(7)|list }} {{ items|batch(7, 'x')|list }}",
    "{{ items|slice(3)|list }} {{ items|slice(45, 0)|list }}",
    "{{ items|sort|list }} {{ items|sort(reverse=true)|join(',') }}",
    "{{ ([{'a': 2, 'b': 1}, {'a': 1, 'b': 2}] * 20)|sort(attribute='a,b')|list }}",
    "{{ ([{'a': 2}, {'a': 1}] * 20)|groupby('a')|list }}",
    "{{ dict.fromkeys(items, 1)|dictsort(reverse=true) }}",
    "{{ none|map('upper')|list }} {{ none|select|list }} {{ nothing|map('upper')|list }}",
    "{{ items|join('-') }} {{ [items, items]|join('|') }}",
    "{{ [items] }} {{ {'a': items} }} {{ items ~ '' }} {{ '%s' % (items,) }}",
    "{{ '{0} {1}'.format(items, {'a': 1}) }} {{ items|string|length }} {{ items|tojson }}",
    "{{ items|pprint }} {{ {'a': items}|tojson(indent=2) }} {{ {'b': 1, 'a': 2}|xmlattr }}",
    "{{ ('hello-world foo(bar) ' * 4000)|title|length }} {{ ('Ab-cD ' * 20000)|title|length }}",
    "{{ ('see a.com or http://b.org/x?y now ' * 3000)|urlize|length }}",
    "{{ ('a&b ü ' * 20000)|urlencode|length }}",
    "{{ (('word ' * 30000 ~ '\\n') * 3)|wordwrap(13)|length }}",
    "{{ (('word ' * 30000 ~ '\\r\\n\\n') * 3)|wordwrap(7, wrapstring='<br>')|length }}",
    "{{ ('<b>x</b> &amp; <!-- c --> y ' * 300)|striptags }} {{ (('<i>a</i>' * 300)|safe).striptags() }}",
    "{{ ((',a' * 3000)|safe).split(',')|length }} {{ (('a\\nb' * 3000)|safe).splitlines()|last }}",
    "{{ (('&lt;' * 3000)|safe).unescape()|length }} {{ ('-'|safe).join(items) }}",
    "{{ (('%s<' * 40)|safe) % (('<',) * 40) }} {{ (('a\\n' * 3000)|safe|indent(2))|length }}",
    "{{ (('ab-cd ' * 20000)|safe|title)|length }} {{ (('a.com ' * 20000)|safe|urlize)|length }}",
    "{{ (('a\\n\\n' * 30000)|indent(first=true, blank=true))|length }}",
    "{{ items|map('upper')|first }} {{ 'x'.encode() * 3 }} {{ '%s%d'.encode() % ('a'.encode(), 1) }}",
    # the loop object's values (read by a shortcut of the sandbox's getattr)
    "{% for m in messages + messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
    "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }}"
    "{{ loop.depth0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a', 'b') }}"
    "{{ loop.changed(m) }}{{ loop._iterator is defined }}{% endfor %}",
    "{% for f in ['{0}!'.format, '{0}?'.format] %}{{ loop.nextitem('y') if loop.first }}"
    "{{ loop.previtem('z') if loop.last }}{% endfor %}",
    "{% for x in [[1, [2]]] recursive %}{{ loop.depth }}{{ loop(x[1:]) if x is iterable }}"
    "{% endfor %}",
]


@pytest.mark.parametrize("expression", SAME_AS_JINJA)
def test_guarded_filters_give_jinjas_results(expression: str) -> None:
    source = _ITEMS + expression
    want = _REFERENCE.from_string(source).render(messages=[{"role": "user", "content": "x"}])
    template = ChatTemplate(source)
    assert template.render([{"role": "user", "content": "x"}]) == want


def test_a_filter_generator_prints_as_jinjas() -> None:
    text = ChatTemplate("{{ [1, 2]|slice(2) }}").render([{"role": "user", "content": "x"}])
    assert text.startswith("<generator object sync_do_slice at 0x")


def test_the_callers_containers_are_printed_as_passed(request_data: dict[str, Any]) -> None:
    # a caller's list is printed without being measured first; repeated by the template,
    # the same list is measured like any value the template built
    long_text = "y" * 200_000
    template = ChatTemplate("{{ custom|tojson|length }}", limits=TIGHT)
    messages = request_data["messages"]
    assert template.render(messages, custom=[long_text] * 4) == str(4 * 200_002 + 2 + 3 * 2)
    repeated = ChatTemplate("{{ ([custom] * 100)|tojson|length }}", limits=TIGHT)
    with pytest.raises(TemplateLimitError):
        repeated.render(messages, custom=[long_text] * 4)


def test_whole_codecs_with_an_error_handler_are_capped(request_data: dict[str, Any]) -> None:
    # utf-16's decoder runs whole: with an error handler, Python calls back per bad unit
    source = "{{ ('ab' * 131073).encode().decode('utf-16', 'replace')|length }}"
    with pytest.raises(TemplateLimitError) as caught:
        _render(ChatTemplate(source, limits=Limits(5, 2_000_000)), request_data)
    assert "limited to 262144" in str(caught.value)
    below = "{{ ('ab' * 131072).encode().decode('utf-16', 'replace')|length }}"
    assert _render(ChatTemplate(below, limits=Limits(5, 2_000_000)), request_data) == "131072"
