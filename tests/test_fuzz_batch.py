"""Issue 8: bad request lines for ``chatcodec batch`` (hypothesis-built, mixed with good ones).

A batch mixes good render and parse requests with bad lines: text that is not JSON, bytes
that are not UTF-8, JSON that is not an object, numbers JSON cannot carry or Python cannot
convert, fields of the wrong JSON type, unknown fields, templates outside ``--templates``.
The command runs in-process (``cli.main``; one run through ``python -m chatcodec`` checks
that this is the real command), and must keep the README's promises:

- one JSON result line per request line, in order, each a strict JSON object naming its
  line's id (``null`` for a line that is no request);
- a good line's result is the one it has alone, whatever its neighbours;
- a line that cannot be run is a ``UsageError`` result and the batch goes on; never an
  ``InternalError``, never a traceback;
- exit status 0, or 2 with one stderr line counting the ``UsageError`` lines.

Needs no ../shared: the templates folder is examples/chatml-tiny. The suite runs 60 seeded
batches; the fuzz suite's long run (README) takes a tenth of ``CHATCODEC_FUZZ``:

    CHATCODEC_FUZZ=20000 python -m pytest tests/test_fuzz_batch.py -q
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from chatcodec import cli
from chatcodec.batch import TemplateFiles, batch_result

from .conftest import ROOT

CHECKPOINT = ROOT / "examples" / "chatml-tiny"
TEMPLATE = "chat_template.jinja"
HI = [{"role": "user", "content": "Hi"}]
EXAMPLES = max(60, int(os.environ.get("CHATCODEC_FUZZ", "0")) // 10)
SEED = int(os.environ.get("CHATCODEC_FUZZ_SEED", "8"))
GOOD: tuple[dict[str, Any], ...] = (
    {"template": TEMPLATE, "messages": HI, "add_generation_prompt": True},
    {"template": TEMPLATE, "messages": HI, "tools": [], "now_unix": 0},
    {
        "template": TEMPLATE,
        "messages": HI,
        "outputs": [
            {"text": "<think>hm</think>Hello", "is_partial": False},
            {"text": "<tool_call>\n{", "is_partial": True},
        ],
    },
)
# names that must not reach a file outside the template folder
OUTSIDE = (
    "../README.md",
    "/etc/passwd",
    str(CHECKPOINT / TEMPLATE),
    "sub/../../chat_template.jinja",
    "chat_template.jinja\x00",
    "",
    "..",
    "no-such.jinja",
)


@dataclass(frozen=True)
class Line:
    """One line of the batch and what its result must be: ``good`` (the result it has
    alone), ``unreadable`` (no request: a UsageError of id null naming its line number),
    ``usage`` (a UsageError of its id) or ``any`` (a result of either schema, of its id)."""

    raw: bytes
    kind: str
    request: dict[str, Any] | None = None


def _json(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(10**300, 10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner)


JSON = st.recursive(_SCALARS, _containers, max_leaves=8)
FIELDS = st.sampled_from(
    ["template", "messages", "tools", "documents", "add_generation_prompt", "now_unix"]
    + ["kwargs", "continue_final_message", "bos_token", "eos_token", "outputs"]
    + ["tool_choice", "parallel_tool_calls", "reasoning_format", "chat_template_kwargs"]
    + ["enable_thinking", "llama_cpp", "chat_template"]
)


KW = ("kwargs", "chat_template_kwargs")


def _good(index: int) -> Line:
    return Line(b"", "good", dict(GOOD[index]))


def _wrong_types(base: int, fields: dict[str, Any]) -> Line:
    return Line(b"", "any", {**GOOD[base], **fields})


def _unknown(base: int, extra: dict[str, Any]) -> Line:
    # fields no schema reads leave a good request's result as it is
    known = {"template", "messages", "outputs", "tools", "kwargs", "documents", "llama_cpp"}
    extra = {f"x-{k}": v for k, v in extra.items() if k not in known}
    return Line(b"", "good", {**GOOD[base], **extra})


def _outside(base: int, name: str) -> Line:
    return Line(b"", "usage", {**GOOD[base], "template": name})


def _not_json(text: str) -> Line:
    return Line(("{" + text).encode("utf-8", "surrogatepass"), "unreadable")


def _not_utf8(base: int, junk: bytes) -> Line:
    raw = _json({**GOOD[base], "id": "x"}).replace(b'"x"', b'"' + junk + b'"')
    return Line(raw, "unreadable")


def _not_object(value: Any) -> Line:
    return Line(_json(value), "unreadable")


def _numbers(base: int, literal: str) -> Line:
    # a number Python cannot convert, or NaN / Infinity: JSON has no such values
    return Line(b'{"n": ' + literal.encode() + b", " + _json(GOOD[base])[1:], "unreadable")


def _is_json(text: str) -> bool:
    try:
        json.loads("{" + text)
    except (ValueError, RecursionError):
        return False
    return True


_BASE = st.integers(0, len(GOOD) - 1)
LINES = st.one_of(
    st.builds(_good, _BASE),
    st.builds(_wrong_types, _BASE, st.dictionaries(FIELDS, JSON, min_size=1, max_size=3)),
    st.builds(  # template variables: any name (a warning when the template never reads it)
        _wrong_types,
        _BASE,
        st.fixed_dictionaries(
            {}, optional={k: st.dictionaries(st.text(max_size=5), JSON, max_size=2) for k in KW}
        ),
    ),
    st.builds(_unknown, _BASE, st.dictionaries(st.text(max_size=8), JSON, max_size=3)),
    st.builds(_outside, _BASE, st.sampled_from(OUTSIDE)),
    st.builds(_not_json, st.text(max_size=20).filter(lambda t: "\n" not in t and not _is_json(t))),
    st.builds(_not_utf8, _BASE, st.sampled_from([b"\xff", b"caf\xe9", b"\xc3(", b"\xed\xa0\x80"])),
    st.builds(_not_object, st.lists(JSON, max_size=3) | _SCALARS),
    st.builds(_numbers, _BASE, st.sampled_from(["1" * 4400, "-" + "9" * 5000, "NaN", "1e999"])),
)


@cache
def _files() -> TemplateFiles:
    return TemplateFiles(CHECKPOINT)


def _batch(lines: list[Line]) -> bytes:
    """The batch's input: each line's bytes (a request gets the id ``L<n>``)."""
    out = []
    for n, line in enumerate(lines):
        out.append(line.raw if line.request is None else _json({**line.request, "id": f"L{n}"}))
    return b"\n".join(out) + b"\n"


def _run_in_process(stdin: bytes) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    source = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    with mock.patch.object(sys, "stdin", source), redirect_stdout(out), redirect_stderr(err):
        status = cli.main(["batch", "--templates", str(CHECKPOINT)])
    return status, out.getvalue(), err.getvalue()


def _strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in a result line: not JSON")

    return json.loads(text, parse_constant=refuse)


def _check(lines: list[Line], status: int, stdout: str, stderr: str) -> None:
    assert "Traceback" not in stderr
    results = [_strict(text) for text in stdout.splitlines()]
    assert len(results) == len(lines), (len(results), len(lines))
    unusable = 0
    for n, (line, result) in enumerate(zip(lines, results, strict=True)):
        assert isinstance(result, dict), result
        error: dict[str, Any] = result.get("error") or {}
        assert error.get("type") != "InternalError", result
        unusable += error.get("type") == "UsageError"
        if line.kind == "unreadable":
            assert result["id"] is None and error.get("type") == "UsageError", result
            assert error["message"].startswith(f"line {n + 1} "), result
            continue
        assert result["id"] == f"L{n}", result
        assert line.request is not None
        if line.kind == "good":
            assert result == batch_result({**line.request, "id": f"L{n}"}, _files()), result
        elif line.kind == "usage":
            assert error.get("type") == "UsageError", result
        else:  # the render schema's answer or error, or the parse schema's results
            assert set(result) in ({"id", "rendered"}, {"id", "error"}, {"id", "results"}), result
    # besides the count line, stderr holds only warnings (a keyword the template never reads)
    said = [x for x in stderr.splitlines() if not x.startswith("chatcodec batch: warning: ")]
    if unusable:
        assert status == 2
        assert said == [
            f"chatcodec batch: {unusable} UsageError of {len(lines)} requests could not be run "
            "(see their result lines)"
        ]
    else:
        assert (status, said) == (0, [])


@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(lines=st.lists(LINES, min_size=1, max_size=12))
def test_a_batch_of_bad_and_good_lines_keeps_its_promises(lines: list[Line]) -> None:
    status, stdout, stderr = _run_in_process(_batch(lines))
    _check(lines, status, stdout, stderr)


def test_the_command_answers_a_mixed_batch_as_the_in_process_run_does() -> None:
    lines = [
        _good(0),
        _not_json('"id": 1,'),
        _good(2),
        _not_utf8(0, b"\xff"),
        _numbers(1, "1" * 4400),
        _numbers(0, "NaN"),
        _numbers(2, "1e999"),
        _outside(0, "../README.md"),
        _outside(2, "/etc/passwd"),
        _wrong_types(0, {"template": 5, "kwargs": [1]}),
        _wrong_types(2, {"outputs": [{"text": 3}]}),
        _wrong_types(0, {"messages": [1, 2], "now_unix": 10**400}),
        _not_object([1, {"a": None}]),
        _unknown(1, {"colour": "red"}),
        _wrong_types(0, {"kwargs": {"colour": "red"}}),  # a warning line, the prompt rendered
        _good(1),
    ]
    stdin = _batch(lines)
    done = subprocess.run(
        [sys.executable, "-m", "chatcodec", "batch", "--templates", str(CHECKPOINT)],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    stdout, stderr = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    _check(lines, done.returncode, stdout, stderr)
    assert (done.returncode, stdout, stderr) == _run_in_process(stdin)
    assert done.returncode == 2
    assert stderr.startswith("chatcodec batch: warning: the chat template never reads 'colour'")
    assert stderr.endswith(
        "chatcodec batch: 10 UsageError of 16 requests could not be run (see their result lines)\n"
    )
