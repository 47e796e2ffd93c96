"""vLLM's own tool and reasoning parsers against the chatcodec plugin, on the same replies.

For each family vLLM ships a parser for, every finished output of the parse corpus
(``../shared/oracle/parse/cases.jsonl``) goes through vLLM's chat endpoint code twice: once
with the family's native parsers (``--tool-call-parser X --reasoning-parser Y``), once with
``chatcodec``; each finished (``Parser.parse``) and streamed (``ChatStreamProcessor``, one
engine token per step), in the same run. Printed per family: how many messages equal
llama.cpp's expected message (the corpus' ``compare.py`` rule), finished and streamed; how
many streams end where the same parser's finished parse does; how many replies raised; and
the median time per streamed step (the parser's work plus vLLM's per-chunk code around it).

Run: ``pip install -e '.[vllm]' && python benchmarks/vllm_parsers.py [--every N]``.

The tokenizer is a stand-in with the family's markers as whole tokens (the tokens vLLM's
parsers look for by id) and the text between them in 3-character tokens; cases whose
options keep a thought in the content (``reasoning_format: none``) run with no reasoning
parser, on both sides. gpt-oss is left out: vLLM reads it with its Harmony parser, which
decodes the token ids of gpt-oss's own vocabulary (o200k_harmony), which a stand-in cannot
give.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._reply_oracle import cases_by_template, load_compare  # noqa: E402
from tests._vllm import (  # noqa: E402
    Reply,
    Tokenizer,
    every_final_output,
    finished,
    parser_class,
    streamed,
    vllm_request,
)
from tests.conftest import template_source  # noqa: E402

import chatcodec.integrations.vllm_parsers  # noqa: E402,F401  (registers "chatcodec")

# corpus template -> (vLLM tool parser, vLLM reasoning parser or None), by vLLM's docs
NATIVE: dict[str, tuple[str, str | None]] = {
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": ("hermes", None),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("hermes", None),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("hermes", None),
    "Qwen-Qwen3-0.6B.jinja": ("hermes", "qwen3"),
    "Qwen-QwQ-32B.jinja": ("hermes", "deepseek_r1"),
    "Qwen3-Coder.jinja": ("qwen3_coder", None),
    "Qwen3.5-4B.jinja": ("qwen3_coder", "qwen3"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": ("qwen3_coder", "nemotron_v3"),
    "StepFun3.5-Flash.jinja": ("step3p5", "step3p5"),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("mistral", None),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("mistral", None),
    "unsloth-mistral-Devstral-Small-2507.jinja": ("mistral", None),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("mistral", "mistral"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("llama3_json", None),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("llama3_json", None),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama3_json", None),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("deepseek_v31", "deepseek_v3"),
    "deepseek-ai-DeepSeek-V3.2.jinja": ("deepseek_v32", "deepseek_v3"),
    "deepseek-ai-DeepSeek-V4.jinja": ("deepseek_v4", "deepseek_v4"),
    "deepseek-ai-DeepSeek-V4-Flash-0731.jinja": ("deepseek_v4", "deepseek_v4"),
    "llama-cpp-deepseek-r1.jinja": ("deepseek_v3", "deepseek_r1"),
    "Kimi-K2-Instruct.jinja": ("kimi_k2", "kimi_k2"),
    "Kimi-K2-Thinking.jinja": ("kimi_k2", "kimi_k2"),
    "moonshotai-Kimi-K2.jinja": ("kimi_k2", "kimi_k2"),
    "Kimi-K3.jinja": ("kimi_k3", "kimi_k3"),
    "GLM-4.6.jinja": ("glm45", "glm45"),
    "GLM-4.7-Flash.jinja": ("glm47", "glm45"),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ("granite", "granite"),
    "ibm-granite-granite-4.0.jinja": ("granite4", None),
    "ibm-granite-granite-4.1.jinja": ("granite4", None),
    "MiniMax-M2.jinja": ("minimax_m2", "minimax_m2"),
    "MiniMax-M3.jinja": ("minimax_m3", "minimax_m3"),
    "ByteDance-Seed-OSS.jinja": ("seed_oss", "seed_oss"),
    "google-gemma-4-31B-it.jinja": ("gemma4", "gemma4"),
    "google-gemma-4-31B-it-interleaved.jinja": ("gemma4", "gemma4"),
    "LFM2-8B-A1B.jinja": ("lfm2", None),
    "LFM2.5-8B-A1B.jinja": ("lfm2", None),
    "LFM2.5-Instruct.jinja": ("lfm2", None),
    "inclusionai-ling-3.0-flash.jinja": ("ling3", "ling3"),
    "MiMo-VL.jinja": ("mimo", "mimo"),
    "poolside-Laguna-XS.2.jinja": ("poolside_v1", "poolside_v1"),
    "poolside-Laguna-XS-2.1.jinja": ("poolside_v1", "poolside_v1"),
    "poolside-Laguna-S-2.1.jinja": ("poolside_v1", "poolside_v1"),
    "tencent-Hy3.jinja": ("hy_v3", "hy_v3"),
    "Apertus-8B-Instruct.jinja": ("apertus", None),
    "GigaChat3-10B-A1.8B.jinja": ("gigachat3", None),
    "GigaChat3.1-10B-A1.8B.jinja": ("gigachat3", None),
    "openbmb-MiniCPM5-1B.jinja": ("minicpm5", None),
    "muse-glimmer.jinja": ("muse_glimmer", "muse_glimmer"),
}


@dataclass
class Tally:
    outputs: int = 0
    finished_ok: int = 0
    streamed_ok: int = 0
    consistent: int = 0
    errors: int = 0
    finished_rules_ok: int = 0  # = llama.cpp's message with vLLM's own rules applied to it
    streamed_rules_ok: int = 0
    step_times: list[float] = field(default_factory=list)  # every step but a stream's first
    first_steps: list[float] = field(default_factory=list)  # chatcodec prepares the turn there


# tokens vLLM's native parsers look up in the vocabulary at start-up and refuse to run without
NATIVE_TOKENS = ("<|python_tag|>", "<assistant>", "<think>", "</think>")


def _vocab(case: dict[str, Any]) -> dict[str, int]:
    """The family's markers, each a whole token: what llama.cpp keeps whole for the request
    (preserved tokens, thinking tags), the template's BOS/EOS, and the tokens vLLM's native
    parsers require."""
    setup = case["llama_cpp"] or {}
    markers = [
        *(setup.get("preserved_tokens") or []),
        setup.get("thinking_start_tag") or "",
        *(setup.get("thinking_end_tags") or []),
        case.get("bos_token") or "",
        case.get("eos_token") or "",
        *NATIVE_TOKENS,
    ]
    return {m: i for i, m in enumerate(dict.fromkeys(m for m in markers if m), start=1)}


def _with_vllm_rules(case: dict[str, Any], text: str, expected: dict, stream: bool) -> dict:
    """llama.cpp's message as vLLM's chat endpoint would pass it on from any parser
    (docs/vllm.md, "What vLLM adds on top"): first call only under parallel_tool_calls
    false; finished, blank content beside calls dropped, and a blank reply under a required
    tool choice an empty message; streamed, an empty output an empty message."""
    out = {**expected, "tool_calls": list(expected.get("tool_calls") or [])}
    tools = bool(case.get("tools"))
    if stream and not text:
        return {"content": "", "reasoning_content": "", "tool_calls": []}
    if tools and case["parallel_tool_calls"] is False:
        out["tool_calls"] = out["tool_calls"][:1]
    if not stream and out["tool_calls"] and not (out.get("content") or "").strip():
        out["content"] = ""
    if not stream and tools and case["tool_choice"] == "required" and not text.strip():
        if not out["tool_calls"]:
            out["content"] = ""
    return out


def _run(
    tool: str, reasoning: str | None, case: dict[str, Any], text: str, tally: Tally
) -> tuple[Reply, Reply] | None:
    tokenizer = Tokenizer(
        template_source(case["template"]), case["bos_token"], case["eos_token"], _vocab(case)
    )
    think = (case["llama_cpp"] or {}).get("thinking_start_tag") or ""
    if think.startswith("<think") and think.endswith(">"):  # Hy3's <think{suffix}>
        tokenizer.init_kwargs["token_suffix"] = think[len("<think") : -1]
    pieces, ids = tokenizer.tokenize(text)
    try:
        cls = parser_class(
            tool, reasoning if case["reasoning_format"] != "none" else None, tokenizer
        )
        request = vllm_request(case)
        whole = finished(cls, tokenizer, request, text)
        times: list[float] = []
        stream, _ = streamed(cls, tokenizer, request, pieces or [""], ids or None, times)
        tally.first_steps.append(times[0])
        tally.step_times += times[1:]
    except Exception:  # a parser that raises on a reply: counted, not fatal
        tally.errors += 1
        return None
    return whole, stream


def measure(every: int) -> dict[tuple[str, str], Tally]:
    compare = load_compare().compare
    tallies: dict[tuple[str, str], Tally] = defaultdict(Tally)
    by_template = cases_by_template()
    for template, (tool, reasoning) in NATIVE.items():
        cases = by_template.get(template, ())[::every]
        for case, _, output in every_final_output(cases):
            if "expected" not in output:
                continue
            for side, (t, r) in (("native", (tool, reasoning)), ("chatcodec", ("chatcodec",) * 2)):
                tally = tallies[(template, side)]
                tally.outputs += 1
                got = _run(t, r, case, output["text"], tally)
                if got is None:
                    continue
                whole, stream = got
                tally.finished_ok += compare(output["expected"], whole.as_oracle()) is None
                tally.streamed_ok += compare(output["expected"], stream.as_oracle()) is None
                tally.consistent += whole == stream
                text, expected = output["text"], output["expected"]
                for got, is_stream in ((whole, False), (stream, True)):
                    ruled = _with_vllm_rules(case, text, expected, is_stream)
                    ok = compare(ruled, got.as_oracle()) is None
                    if is_stream:
                        tally.streamed_rules_ok += ok
                    else:
                        tally.finished_rules_ok += ok
    return tallies


def _family(template: str) -> str:
    tool, reasoning = NATIVE[template]
    return tool + (f"+{reasoning}" if reasoning else "")


def _us(values: list[float], q: float = 0.5) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def _add(total: Tally, tally: Tally) -> None:
    total.outputs += tally.outputs
    total.finished_ok += tally.finished_ok
    total.streamed_ok += tally.streamed_ok
    total.consistent += tally.consistent
    total.errors += tally.errors
    total.finished_rules_ok += tally.finished_rules_ok
    total.streamed_rules_ok += tally.streamed_rules_ok
    total.step_times += tally.step_times
    total.first_steps += tally.first_steps


def report(tallies: dict[tuple[str, str], Tally]) -> None:
    head = (
        f"{'template':40} {'vLLM parsers':24} {'n':>4} | {'native f/s/same/err':>19}"
        f" {'us/st':>5} {'1st':>5} | {'chatcodec f/s/same/err':>22} {'us/st':>5} {'1st':>5}"
    )
    print(head)
    print("-" * len(head))
    totals = {"native": Tally(), "chatcodec": Tally()}
    for template in NATIVE:
        native, ours = tallies.get((template, "native")), tallies.get((template, "chatcodec"))
        if native is None or ours is None or not native.outputs:
            continue
        cells = []
        for side, tally in (("native", native), ("chatcodec", ours)):
            _add(totals[side], tally)
            counts = f"{tally.finished_ok}/{tally.streamed_ok}/{tally.consistent}/{tally.errors}"
            width = 19 if side == "native" else 22
            cells.append(
                f"{counts:>{width}} {_us(tally.step_times):5.0f} {_us(tally.first_steps):5.0f}"
            )
        name = f"{template[:40]:40} {_family(template)[:24]:24} {native.outputs:4d} | "
        print(name + " | ".join(cells))
    print("-" * len(head))
    for side, total in totals.items():
        n = total.outputs or 1
        print(
            f"{side:10} {total.outputs} outputs: finished = llama.cpp {total.finished_ok} "
            f"({100 * total.finished_ok / n:.1f}%), streamed = llama.cpp {total.streamed_ok} "
            f"({100 * total.streamed_ok / n:.1f}%), stream = own finished {total.consistent} "
            f"({100 * total.consistent / n:.1f}%), raised {total.errors}; = llama.cpp after "
            f"vLLM's rules: finished {total.finished_rules_ok}, streamed {total.streamed_rules_ok}"
            f"; per streamed step "
            f"median {_us(total.step_times):.0f} us, p90 {_us(total.step_times, 0.9):.0f} us; "
            f"first step median {_us(total.first_steps):.0f} us"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every", type=int, default=1, help="take every Nth case (default all)")
    args = parser.parse_args()
    report(measure(args.every))


if __name__ == "__main__":
    main()
