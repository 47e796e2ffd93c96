"""Template + request options -> the reply format llama.cpp would build for them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .description import ReplyFormat
from .families import (
    cohere2_moe,
    deepseek_dsml,
    functionary_v32,
    gemma4,
    gigachat_v3,
    gpt_oss,
    kimi_k2,
    kimi_k3,
    lfm2,
    ling3,
    minicpm5,
    minimax_m3,
    ministral,
    muse_glimmer,
    plain,
    qwen3_coder,
)

__all__ = ["handler_for", "describe"]

# llama.cpp's specialized handlers, in its dispatch order: (name, required markers, excluded)
_SPECIALIZED: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("Ministral/Magistral Large 3", ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]"), ("[CALL_ID]",)),
    ("GPT-OSS", ("<|channel|>",), ()),
    ("Muse Glimmer", ("<atem:function_calls>", "<|eom|>"), ()),
    ("Functionary v3.2", (">>>all", ">>>${recipient}"), ()),
    ("Kimi K2 Thinking", ("<|tool_calls_section_begin|>", "<|tool_call_begin|>"), ()),
    ("Kimi K3", ("<|open|>", "<|close|>", "<|end_of_msg|>"), ()),
    ("Ling 3.0 (Bailing V3)", ("<role>ASSISTANT</role>", "<arg_key>"), ()),
    ("Cohere2 MoE", ("<|START_TEXT|>", "<|START_ACTION|>"), ()),
    ("LFM2", ("<|tool_list_start|>", "<|tool_list_end|>"), ()),
    ("LFM2.5", ("List of tools: [",), ("<|tool_list_start|>",)),
    ("GigaChatV3", ("<|role_sep|>", "<|message_sep|>"), ("<|function_call|>",)),
    ("MiniMax-M3", ("]<]minimax[>[", "<tool_call>", "<invoke name="), ()),
    ("DeepSeek V3.2/V4", ("dsml_token", "DSML"), ()),
    ("Gemma4 (inferred from format)", ("'<|tool_call>call:'",), ()),
    ("MiniCPM5", ("Tool usage guidelines:", '<function name="', '<param name="'), ()),
)


def handler_for(source: str) -> str:
    """Which llama.cpp handler a template gets ("autoparser" when none of the specialized)."""
    for name, needed, excluded in _SPECIALIZED:
        if all(m in source for m in needed) and not any(m in source for m in excluded):
            if name == "DeepSeek V3.2/V4" and not (
                "function_calls" in source or "tool_calls" in source
            ):
                continue
            return name
    if qwen3_coder.matches(source):
        return qwen3_coder.HANDLER
    return "autoparser"


def describe(
    source: str,
    generation_prompt: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: str = "auto",
    parallel_tool_calls: bool = True,
    reasoning_format: str = "deepseek",
    enable_thinking: bool = True,
    special_tokens: Mapping[str, str] | None = None,
    json_schema: Mapping[str, Any] | None = None,
    continue_final_message: str = "none",
) -> ReplyFormat:
    """``json_schema``: the request's response format (read by the families that support it:
    Ministral, LFM2/LFM2.5, Cohere2 MoE). ``continue_final_message``: ``"content"`` or
    ``"reasoning_content"`` when a final assistant message is continued (``generation_prompt``
    is then the template's for the conversation before it; the format's ``continuation`` writes
    the one to parse with)."""
    handler = handler_for(source)
    if handler == kimi_k2.HANDLER:
        return kimi_k2.describe(tools, tool_choice, parallel_tool_calls, reasoning_format)
    if handler == kimi_k3.HANDLER:
        return kimi_k3.describe(tools, tool_choice, reasoning_format)
    if handler == ling3.HANDLER:
        return ling3.describe(
            generation_prompt,
            tools,
            tool_choice,
            parallel_tool_calls,
            reasoning_format,
            continue_final_message,
        )
    if handler == minimax_m3.HANDLER:
        return minimax_m3.describe(
            generation_prompt,
            tools,
            tool_choice,
            parallel_tool_calls,
            reasoning_format,
            enable_thinking,
        )
    if handler == deepseek_dsml.HANDLER:
        return deepseek_dsml.describe(
            source, tools, tool_choice, parallel_tool_calls, reasoning_format, enable_thinking
        )
    if handler == minicpm5.HANDLER:
        return minicpm5.describe(tools, tool_choice, parallel_tool_calls, reasoning_format)
    if handler == qwen3_coder.HANDLER:
        return qwen3_coder.describe(
            source, tools, tool_choice, parallel_tool_calls, reasoning_format
        )
    if handler == ministral.HANDLER:
        return ministral.describe(
            tools, tool_choice, parallel_tool_calls, reasoning_format, json_schema
        )
    if handler in (lfm2.HANDLER_LFM2, lfm2.HANDLER_LFM25):
        return lfm2.describe(
            handler, source, tools, tool_choice, parallel_tool_calls, reasoning_format, json_schema
        )
    if handler == cohere2_moe.HANDLER:
        return cohere2_moe.describe(
            tools, tool_choice, parallel_tool_calls, reasoning_format, json_schema
        )
    if handler == "autoparser":
        from . import auto

        return auto.describe(
            source,
            generation_prompt,
            tools,
            tool_choice,
            parallel_tool_calls,
            reasoning_format,
            special_tokens,
            json_schema,
        )
    if handler == gpt_oss.HANDLER:
        return gpt_oss.describe(tools, tool_choice, reasoning_format, json_schema)
    if handler == gemma4.HANDLER:
        return gemma4.describe(tools, tool_choice, parallel_tool_calls, reasoning_format)
    if handler == muse_glimmer.HANDLER:
        return muse_glimmer.describe(tools, tool_choice, parallel_tool_calls, reasoning_format)
    if handler == functionary_v32.HANDLER:
        return functionary_v32.describe(tools, tool_choice, parallel_tool_calls)
    if handler == gigachat_v3.HANDLER:
        return gigachat_v3.describe(tools, tool_choice)
    # families of part 2 fall back to plain content and reasoning for now
    return plain.describe(
        "auto" if handler == "autoparser" else handler, source, generation_prompt, reasoning_format
    )
