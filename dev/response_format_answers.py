"""llama.cpp's answers for tests/test_reply_response_format.py (a developer tool).

    python dev/response_format_answers.py [--oracle BINARY]

Asks llama.cpp's oracle (``../shared/tools/llamacpp-oracle``, built by its ``build.sh``) for the
setup and the parse of every reply of every request the test defines, and writes them to
``tests/data/reply_response_format.json``: per request, the handler, the generation prompt, the
prompt, whether the grammar is lazy, and per reply (whole, then partial) the message's content,
reasoning and call names, or ``{"error": true}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests import test_reply_response_format as t  # noqa: E402

DEFAULT_ORACLE = Path.home() / ".cache" / "chatcodec-oracle" / "chat_oracle"


def _request(case: str, family: str, options: str, path: Path) -> dict[str, Any]:
    opts = t.OPTIONS[options]
    outputs = [{"text": r, "is_partial": p} for r in t.replies(family) for p in (False, True)]
    return {
        "id": case,
        "template": str(path),
        "bos_token": "<s>",
        "eos_token": "</s>",
        "messages": t.HI,
        "tools": opts.get("tools"),
        "tool_choice": opts.get("tool_choice", "auto"),
        "parallel_tool_calls": opts.get("parallel_tool_calls", False),
        "enable_thinking": opts.get("enable_thinking", True),
        "reasoning_format": opts.get("reasoning_format", "deepseek"),
        "chat_template_kwargs": {},
        "add_generation_prompt": True,
        "json_schema": t.SCHEMA,
        "outputs": outputs,
    }


def _result(result: dict[str, Any]) -> dict[str, Any]:
    if not result.get("ok"):
        return {"error": True}
    msg = result["msg"]
    return {
        "content": msg["content"],
        "reasoning_content": msg["reasoning_content"],
        "tool_calls": [c["name"] for c in msg["tool_calls"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--oracle", type=Path, default=Path(os.environ.get("CHAT_ORACLE", DEFAULT_ORACLE))
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        for case, family, options in t.requests():
            path = Path(tmp) / f"{family}.jinja"
            path.write_text(t.TEMPLATES[family], encoding="utf-8")
            lines.append(json.dumps(_request(case, family, options, path), ensure_ascii=False))
        done = subprocess.run(
            [str(args.oracle), os.path.join(tmp, "oracle.log")],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            check=True,
        )
    answers: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        answer = json.loads(line)
        if not answer.get("ok"):
            sys.exit(f"llama.cpp failed on {answer.get('id')}: {answer.get('error')}")
        params = answer["params"]
        answers[answer["id"]] = {
            "handler": answer["handler"],
            "generation_prompt": params["generation_prompt"],
            "prompt": params["prompt"],
            "grammar_lazy": params["grammar_lazy"],
            "outputs": [_result(r) for r in answer["results"]],
        }
    t.DATA.write_text(json.dumps(answers, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(answers)} requests written to {t.DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
