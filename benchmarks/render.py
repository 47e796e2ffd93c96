"""chatcodec vs transformers: render time, compile time and cold import time, in one run.

Run from the repository root (the corpus lives in ``../shared`` beside the checkout)::

    pip install -e '.[bench]'          # transformers==5.23.0, benchmark-only
    python benchmarks/render.py          # the whole corpus (about 1.5 minutes)
    python benchmarks/render.py --quick  # every 10th case (about 30 seconds)
    python benchmarks/render.py --minijinja  # also evaluate the minijinja binding

transformers is measured the way a user calls it: ``tokenizer.apply_chat_template(...,
tokenize=False)`` on a minimal in-memory ``PreTrainedTokenizerFast`` (a one-word WordLevel
model, no special tokens, as the oracle's tokenizer) whose ``chat_template`` is set to the
template. chatcodec is ``ChatTemplate(source).render(...)``. Every timed case is checked: the
two outputs must be equal (or both must fail with the same error class), else the run fails.
All ratios are chatcodec time / transformers time, measured in this same run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# transformers' strftime_now reads the local wall clock; the oracle ran with TZ=UTC
os.environ["TZ"] = "UTC"
if hasattr(time, "tzset"):
    time.tzset()

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SHARED = ROOT.parent / "shared"

Render = Callable[[], Any]


# --- the corpus -----------------------------------------------------------------------


def load_cases(shared: Path) -> list[dict[str, Any]]:
    path = shared / "oracle" / "render" / "expectations.jsonl"
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_sources(shared: Path, cases: Sequence[dict[str, Any]]) -> dict[str, str]:
    names = sorted({case["template"] for case in cases})
    folder = shared / "chat_templates"
    return {name: (folder / name).read_text(encoding="utf-8") for name in names}


def pinned(now_unix: float) -> datetime:
    return datetime.fromtimestamp(now_unix, tz=timezone.utc).replace(tzinfo=None)


# --- the two engines ------------------------------------------------------------------


class Transformers:
    """``apply_chat_template(tokenize=False)`` on an in-memory tokenizer, clock pinnable."""

    def __init__(self) -> None:
        import transformers.utils.chat_template_utils as ctu
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from transformers import PreTrainedTokenizerFast

        self.utils = ctu
        self.tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
        )
        self.now: datetime = datetime.now()
        bench = self

        class _PinnedClock(datetime):
            @classmethod
            def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
                return bench.now

        # strftime_now looks `datetime` up in transformers' module globals on every call
        setattr(ctu, "datetime", _PinnedClock)  # noqa: B010 - a benchmark-only clock pin

    def use(self, source: str) -> None:
        self.tokenizer.chat_template = source

    def render(self, case: dict[str, Any]) -> Render:
        tokenizer = self.tokenizer
        messages = case["messages"]
        tools = case["tools"]
        documents = case["documents"]
        agp = case["add_generation_prompt"]
        cfm = case["continue_final_message"]
        kwargs = case["kwargs"]

        def run() -> Any:
            return tokenizer.apply_chat_template(
                messages,
                tools=tools,
                documents=documents,
                add_generation_prompt=agp,
                continue_final_message=cfm,
                tokenize=False,
                **kwargs,
            )

        return run

    def compile(self, source: str) -> Any:
        # the uncached compile: _compile_jinja_template is an lru_cache over this function
        return self.utils._compile_jinja_template.__wrapped__(source)


def chatcodec_render(template: Any, case: dict[str, Any]) -> Render:
    messages = case["messages"]
    tools = case["tools"]
    documents = case["documents"]
    agp = case["add_generation_prompt"]
    cfm = case["continue_final_message"]
    now = case["now_unix"]
    kwargs = case["kwargs"]
    render = template.render

    def run() -> Any:
        return render(
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=agp,
            continue_final_message=cfm,
            now=now,
            **kwargs,
        )

    return run


# --- timing ---------------------------------------------------------------------------


def outcome(fn: Render) -> tuple[str, Any]:
    """("ok", text) or ("error", class name); chatcodec errors carry the class in ``kind``."""
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - both engines' failures are compared by class
        kind = getattr(exc, "kind", None)
        return "error", kind if isinstance(kind, str) else type(exc).__name__


def swallow(fn: Render) -> Render:
    def run() -> Any:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - error cases are timed too
            return None

    return run


def paired_times(a: Render, b: Render, rounds: int, inner: int) -> tuple[float, float]:
    """Seconds per call of ``a`` and of ``b``: the fastest of ``rounds`` batches each.

    The batches alternate so that a slow spell hits both engines; the fastest batch is the
    estimate least polluted by other processes on a shared machine (as ``timeit`` advises).
    """
    times_a: list[float] = []
    times_b: list[float] = []
    clock = time.perf_counter
    for _ in range(rounds):
        start = clock()
        for _ in range(inner):
            a()
        middle = clock()
        for _ in range(inner):
            b()
        end = clock()
        times_a.append((middle - start) / inner)
        times_b.append((end - middle) / inner)
    return min(times_a), min(times_b)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = q * (len(ordered) - 1)
    low = int(index)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (index - low)


@dataclass
class Timed:
    case_id: str
    template: str
    chatcodec: float
    transformers: float
    error: bool

    @property
    def ratio(self) -> float:
        return self.chatcodec / self.transformers


@dataclass
class Mismatch:
    case_id: str
    chatcodec: tuple[str, Any]
    transformers: tuple[str, Any]


@dataclass
class RenderResults:
    timed: list[Timed] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)


def bench_renders(
    cases: Sequence[dict[str, Any]],
    sources: dict[str, str],
    tf: Transformers,
    rounds: int,
    inner: int,
) -> RenderResults:
    from chatcodec import ChatTemplate

    results = RenderResults()
    compiled = {name: ChatTemplate(source, name=name) for name, source in sources.items()}
    by_template: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case in cases:
        by_template[case["template"]].append(case)
    for name in sorted(by_template):
        tf.use(sources[name])
        gc.collect()
        for case in by_template[name]:
            tf.now = pinned(case["now_unix"])
            ours = chatcodec_render(compiled[name], case)
            theirs = tf.render(case)
            got, want = outcome(ours), outcome(theirs)
            if got != want:
                results.mismatches.append(Mismatch(case["id"], got, want))
                continue
            error = got[0] == "error"
            gc.disable()
            try:
                t_ours, t_theirs = paired_times(swallow(ours), swallow(theirs), rounds, inner)
            finally:
                gc.enable()
            results.timed.append(Timed(case["id"], name, t_ours, t_theirs, error))
    return results


def bench_compile(sources: dict[str, str], tf: Transformers, rounds: int) -> list[Timed]:
    from chatcodec import ChatTemplate

    rows = []
    for name, source in sorted(sources.items()):

        def ours(source: str = source) -> Any:
            return ChatTemplate(source)

        def theirs(source: str = source) -> Any:
            return tf.compile(source)

        t_ours, t_theirs = paired_times(ours, theirs, rounds, 1)
        rows.append(Timed(name, name, t_ours, t_theirs, False))
    return rows


def cold_import(statement: str, repeats: int) -> float:
    """Median seconds a fresh interpreter spends on ``statement`` (startup excluded).

    NaN, with the interpreter's last error line printed, when the statement fails.
    """
    code = f"import time; _t = time.perf_counter(); {statement}; print(time.perf_counter() - _t)"
    samples = []
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or ["(no error output)"]
            print(f"  {statement!r} failed: {lines[-1]}")
            return float("nan")
        samples.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(samples)


# --- the big case ----------------------------------------------------------------------


def big_qwen3_case() -> dict[str, Any]:
    """A Qwen3 agent conversation: 40 messages (tool calls, results, reasoning), 5 tools."""
    tools = []
    for index in range(5):
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"tool_{index}",
                    "description": f"Tool number {index}: looks things up in source {index}.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "query": {"type": "string", "description": "What to look up."},
                            "limit": {"type": "integer", "description": "How many results."},
                            "filters": {
                                "type": "object",
                                "properties": {
                                    "lang": {"type": "string", "enum": ["en", "fr", "de"]},
                                    "since": {"type": "string", "format": "date"},
                                },
                            },
                        },
                        "required": ["query"],
                    },
                },
            }
        )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful research assistant."}
    ]
    turn = 0
    while len(messages) < 39:
        messages.append({"role": "user", "content": f"Question {turn}: what about topic {turn}?"})
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {
                "name": f"tool_{turn % 5}",
                "arguments": {"query": f"topic {turn}", "limit": 3, "filters": {"lang": "en"}},
            },
        }
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": f"I should look topic {turn} up.",
                "tool_calls": [call],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"Result {turn}: ok."}
        )
        messages.append(
            {"role": "assistant", "content": f"Topic {turn} is fine, according to the tool."}
        )
        turn += 1
    messages.append({"role": "user", "content": "Thanks, now summarise everything."})
    messages = messages[:40]
    return {
        "id": "qwen3_big_40_messages_5_tools",
        "template": "Qwen-Qwen3-0.6B.jinja",
        "messages": messages,
        "tools": tools,
        "documents": None,
        "add_generation_prompt": True,
        "continue_final_message": False,
        "kwargs": {"enable_thinking": True},
        "now_unix": 1741165623,
    }


# --- minijinja (evaluation only; not used by chatcodec) ---------------------------------


@dataclass
class MiniJinjaResults:
    identical: int = 0
    same_error_class: int = 0
    differs: int = 0
    engine_error: int = 0
    compile_failures: list[str] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


def bench_minijinja(
    cases: Sequence[dict[str, Any]],
    sources: dict[str, str],
    tf: Transformers,
    rounds: int,
    inner: int,
) -> MiniJinjaResults | None:
    """minijinja behind chatcodec's own input preparation, configured as transformers' env."""
    try:
        import minijinja
    except ImportError:
        return None
    import jinja2

    from chatcodec import ChatTemplate
    from chatcodec.template.render import _cut_at_continue_tag

    clock = {"now": datetime.now()}

    def raise_exception(message: Any) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return clock["now"].strftime(fmt)

    env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True)
    env.add_filter("tojson", tojson)
    env.add_global("raise_exception", raise_exception)
    env.add_global("strftime_now", strftime_now)
    results = MiniJinjaResults()
    compiled = {name: ChatTemplate(source, name=name) for name, source in sources.items()}
    for name, source in sources.items():
        try:
            env.add_template(name, source)
        except Exception:  # noqa: BLE001 - a template minijinja cannot parse
            results.compile_failures.append(name)
    for case in cases:
        name = case["template"]
        template = compiled[name]
        clock["now"] = pinned(case["now_unix"])
        tf.now = clock["now"]

        def run(case: dict[str, Any] = case, template: Any = template, name: str = name) -> Any:
            chat, variables, continue_field, final_text = template._prepare(
                case["messages"],
                case["tools"],
                case["documents"],
                case["add_generation_prompt"],
                case["continue_final_message"],
                dict(case["kwargs"]),
            )
            text = env.render_template(name, **variables)
            if continue_field is not None:
                text = _cut_at_continue_tag(text, final_text)
            return text

        if name in results.compile_failures:
            results.differs += 1
            continue
        tf.use(sources[name])
        want = outcome(tf.render(case))
        got = outcome(run)
        if got == want:
            if got[0] == "ok":
                results.identical += 1
                gc.disable()
                try:
                    t_mini, t_tf = paired_times(run, swallow(tf.render(case)), rounds, inner)
                finally:
                    gc.enable()
                results.ratios.append(t_mini / t_tf)
            else:
                results.same_error_class += 1
        else:
            results.differs += 1
            if got[0] == "error" and got[1] in ("TemplateError", "PanicException"):
                results.engine_error += 1
            if len(results.examples) < 5:
                results.examples.append(
                    f"{case['id']}: minijinja {got[0]} vs transformers {want[0]}"
                )
    return results


# --- reporting ------------------------------------------------------------------------


def micro(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} us"


def milli(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms"


def summarize(label: str, ratios: Sequence[float]) -> str:
    return (
        f"{label}: median {statistics.median(ratios):.3f}  "
        f"p10 {percentile(ratios, 0.1):.3f}  p90 {percentile(ratios, 0.9):.3f}  "
        f"(n={len(ratios)})"
    )


def report_renders(results: RenderResults, worst: int, per_template: bool) -> None:
    rendered = [row for row in results.timed if not row.error]
    errors = [row for row in results.timed if row.error]
    print("\n== per-render time: chatcodec / transformers (lower is better; goal <= 0.25) ==")
    if rendered:
        print(summarize("rendered cases", [row.ratio for row in rendered]))
        print(
            f"  median per render: chatcodec {micro(statistics.median(r.chatcodec for r in rendered))}"
            f"   transformers {micro(statistics.median(r.transformers for r in rendered))}"
        )
        total_ours = sum(r.chatcodec for r in rendered)
        total_theirs = sum(r.transformers for r in rendered)
        print(
            f"  whole corpus, one render each: chatcodec {milli(total_ours)}"
            f"   transformers {milli(total_theirs)}   ratio {total_ours / total_theirs:.3f}"
        )
    if errors:
        print(summarize("error cases (same error class)", [row.ratio for row in errors]))
    by_template: dict[str, list[Timed]] = defaultdict(list)
    for row in rendered:
        by_template[row.template].append(row)
    if per_template and by_template:
        print(f"\n{'template':<52} {'n':>4} {'chatcodec':>12} {'transformers':>12} {'ratio':>6}")
        for name, rows in sorted(
            by_template.items(), key=lambda item: -statistics.median(r.ratio for r in item[1])
        ):
            print(
                f"{name[:52]:<52} {len(rows):>4} {micro(statistics.median(r.chatcodec for r in rows))}"
                f" {micro(statistics.median(r.transformers for r in rows))}"
                f" {statistics.median(r.ratio for r in rows):6.3f}"
            )
    if worst and rendered:
        print(f"\nworst {worst} cases:")
        for row in sorted(rendered, key=lambda r: -r.ratio)[:worst]:
            print(
                f"  {row.case_id[:70]:<70} {micro(row.chatcodec)} {micro(row.transformers)}"
                f" {row.ratio:6.3f}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a sample of the corpus, fewer repeats"
    )
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the shared corpus")
    parser.add_argument("--rounds", type=int, default=None, help="timing rounds per case")
    parser.add_argument("--worst", type=int, default=10, help="how many worst cases to list")
    parser.add_argument("--no-table", action="store_true", help="skip the per-template table")
    parser.add_argument("--no-import", action="store_true", help="skip the cold import timing")
    parser.add_argument("--minijinja", action="store_true", help="also evaluate minijinja")
    args = parser.parse_args(argv)

    try:
        tf = Transformers()
    except ImportError as exc:
        print(f"transformers is needed for the comparison: pip install -e '.[bench]' ({exc})")
        return 2
    import jinja2
    import transformers

    import chatcodec

    cases = load_cases(args.shared)
    sources = load_sources(args.shared, cases)
    rounds = args.rounds or (3 if args.quick else 5)
    inner = 2
    sample = cases[::10] if args.quick else cases
    print(
        f"chatcodec {chatcodec.__version__}, transformers {transformers.__version__}, "
        f"jinja2 {jinja2.__version__}, Python {sys.version.split()[0]}"
    )
    print(
        "transformers path: PreTrainedTokenizerFast(WordLevel).apply_chat_template(tokenize=False)"
    )
    print(
        f"corpus: {len(sample)} of {len(cases)} cases, {len(sources)} templates; "
        f"per case: fastest of {rounds} rounds x {inner} calls, engines alternated, GC off"
    )

    started = time.perf_counter()
    results = bench_renders(sample, sources, tf, rounds, inner)
    report_renders(results, args.worst, not args.no_table)
    print(f"  (render benchmark took {time.perf_counter() - started:.1f} s)")

    big = big_qwen3_case()
    from chatcodec import ChatTemplate

    qwen = ChatTemplate(sources[big["template"]])
    tf.use(sources[big["template"]])
    tf.now = pinned(big["now_unix"])
    ours, theirs = chatcodec_render(qwen, big), tf.render(big)
    big_equal = outcome(ours) == outcome(theirs) and outcome(ours)[0] == "ok"
    t_ours, t_theirs = paired_times(ours, theirs, 15 if args.quick else 41, 3)
    print(f"\n== big case: Qwen3, {len(big['messages'])} messages, {len(big['tools'])} tools ==")
    print(
        f"chatcodec {micro(t_ours)}   transformers {micro(t_theirs)}   "
        f"ratio {t_ours / t_theirs:.3f}   identical output: {big_equal}"
    )

    compile_rows = bench_compile(sources, tf, 3 if args.quick else 5)
    ratios = [row.ratio for row in compile_rows]
    total_ours = sum(row.chatcodec for row in compile_rows)
    total_theirs = sum(row.transformers for row in compile_rows)
    print("\n== compile time (uncached): ChatTemplate(source) / _compile_jinja_template ==")
    print(summarize("per template", ratios))
    print(
        f"  all {len(compile_rows)} templates: chatcodec {milli(total_ours)}"
        f"   transformers {milli(total_theirs)}   ratio {total_ours / total_theirs:.3f}"
    )

    if not args.no_import:
        repeats = 5 if args.quick else 9
        print(
            f"\n== cold import (fresh interpreter, median of {repeats}; goal chatcodec <= 150 ms) =="
        )
        for statement in (
            "import chatcodec",
            "import transformers",
            "from transformers import PreTrainedTokenizerFast",
        ):
            print(f"{statement:<52} {milli(cold_import(statement, repeats))}")

    if args.minijinja:
        mini = bench_minijinja(sample, sources, tf, rounds, inner)
        print("\n== minijinja (evaluation only, behind chatcodec's input preparation) ==")
        if mini is None:
            print("minijinja is not installed: pip install minijinja")
        else:
            from importlib.metadata import version as installed

            import minijinja

            version = getattr(minijinja, "__version__", None) or installed("minijinja")
            total = mini.identical + mini.same_error_class + mini.differs
            print(
                f"minijinja {version}: {mini.identical} rendered identically, "
                f"{mini.same_error_class} failed with the same error class, {mini.differs} differ "
                f"(of {total}); templates it cannot compile: {len(mini.compile_failures)}"
            )
            if mini.ratios:
                print(
                    summarize(
                        "per-render ratio minijinja / transformers (identical only)", mini.ratios
                    )
                )
            for line in mini.examples:
                print(f"  e.g. {line}")

    if results.mismatches:
        print(
            f"\nFAILED: {len(results.mismatches)} cases differ between chatcodec and transformers:"
        )
        for mismatch in results.mismatches[:10]:
            print(f"  {mismatch.case_id}: {mismatch.chatcodec[0]} vs {mismatch.transformers[0]}")
        return 1
    if not big_equal:
        print("\nFAILED: the big case differs between chatcodec and transformers")
        return 1
    print(f"\nall {len(results.timed)} timed cases rendered identically by both engines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
