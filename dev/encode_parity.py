"""Token parity of ``Codec.encode`` with transformers 5.23.0 over the whole render corpus,
per template, with the figures the README quotes.

    PYTHONPATH=src python dev/encode_parity.py            # every rendered conversation
    PYTHONPATH=src python dev/encode_parity.py --every 4  # a quarter of them
    PYTHONPATH=src python dev/encode_parity.py --kind metaspace  # a SentencePiece-style BPE

For each template of ``../shared/chat_templates`` a checkpoint folder is written
(tests/_tokenizer.py: a byte-level BPE trained once, the template's markers as added tokens)
and each conversation of ``../shared/oracle/render/expectations.jsonl`` that renders (not a
continued final message: transformers refuses masks for those) is encoded by both:
``input_ids`` must be equal, and ``assistant_masks`` on templates with ``{% generation %}``.
A conversation both refuse counts as agreeing; one only one refuses is a difference.
``tests/test_encode.py`` runs the same comparison in the suite.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._tokenizer import write_checkpoint  # noqa: E402


class Clock:
    """transformers' ``strftime_now`` reads ``datetime.now()``: pinned per conversation."""

    instant = 0.0

    @classmethod
    def now(cls, tz: Any = None) -> dt.datetime:
        return dt.datetime.fromtimestamp(cls.instant, dt.timezone.utc).replace(tzinfo=None)


def compare(codec: Any, hf: Any, case: dict[str, Any]) -> tuple[str, bool]:
    """(``"ids"``, ``"raised"``, ``"one raised"`` or ``"ids differ"``, masks equal)."""
    Clock.instant = case["now_unix"]
    args = (case["messages"], case["tools"], case["documents"], case["add_generation_prompt"])
    try:
        ours = codec.encode(*args, now=case["now_unix"], **case["kwargs"])
    except Exception:  # noqa: BLE001 - compared with transformers' refusal below
        ours = None
    try:
        theirs = hf.apply_chat_template(
            case["messages"],
            tools=case["tools"],
            documents=case["documents"],
            add_generation_prompt=case["add_generation_prompt"],
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
            **case["kwargs"],
        )
    except Exception:  # noqa: BLE001
        theirs = None
    if ours is None or theirs is None:
        return ("raised" if ours is None and theirs is None else "one raised"), True
    same_ids = ours.input_ids == list(theirs["input_ids"])
    return ("ids" if same_ids else "ids differ"), ours.assistant_masks == list(
        theirs["assistant_masks"]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--every", type=int, default=1, help="take every Nth conversation")
    parser.add_argument(
        "--kind",
        choices=("byte_level", "metaspace"),
        default="byte_level",
        help="the tokenizer: byte-level BPE or SentencePiece-style (tests/_tokenizer.py)",
    )
    args = parser.parse_args(argv)
    import transformers
    import transformers.utils.chat_template_utils as ctu

    from chatcodec import load

    transformers.logging.set_verbosity_error()
    ctu.datetime = Clock  # type: ignore[assignment]
    grouped: dict[str, list[dict[str, Any]]] = {}
    path = args.shared / "oracle" / "render" / "expectations.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if "error" not in case and not case["continue_final_message"]:
            grouped.setdefault(case["template"], []).append(case)
    started = time.perf_counter()
    totals = {"conversations": 0, "ids": 0, "raised": 0, "tag": 0, "masks": 0, "bad": []}
    with tempfile.TemporaryDirectory() as work:
        for name, cases in sorted(grouped.items()):
            kwargs = next((c["kwargs"] for c in cases if c["kwargs"].get("eos_token")), {})
            tokens = {k: kwargs[k] for k in ("bos_token", "eos_token") if kwargs.get(k)}
            source = (args.shared / "chat_templates" / name).read_text(encoding="utf-8")
            folder = write_checkpoint(Path(work) / name, source, tokens, kind=args.kind)
            codec = load(folder)
            hf = transformers.AutoTokenizer.from_pretrained(str(folder))
            tagged = codec.template.has_generation_tag
            for case in cases[:: args.every]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    outcome, masks = compare(codec, hf, case)
                totals["conversations"] += 1
                totals["ids"] += outcome == "ids"
                totals["raised"] += outcome == "raised"
                if tagged and outcome == "ids":
                    totals["tag"] += 1
                    totals["masks"] += masks
                if outcome not in ("ids", "raised") or (tagged and not masks):
                    totals["bad"].append((case["id"], outcome, masks))
    seconds = time.perf_counter() - started
    print(
        f"{len(grouped)} templates, {totals['conversations']} conversations: input_ids equal on "
        f"{totals['ids']} (both refuse {totals['raised']}); assistant_masks equal on "
        f"{totals['masks']} / {totals['tag']} of the {{% generation %}} templates' "
        f"conversations; {seconds:.0f} s"
    )
    for bad in totals["bad"]:
        print("DIFFERS", *bad)
    return 1 if totals["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
