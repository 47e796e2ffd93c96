"""1 vs 2 worker processes: ``chatcodec batch --jobs`` (requests, and a dataset encoded with
``--checkpoint``), ``check-data --jobs`` and the ``DatasetEncoder`` under
``datasets.Dataset.map(num_proc=N)``, in one run.

Run from the repository root (the corpus lives in ``../shared`` beside the checkout)::

    pip install -e '.[dev,data]'        # tokenizers, datasets, tqdm
    python benchmarks/encode_workers.py           # the whole render corpus, 2 rounds
    python benchmarks/encode_workers.py --quick   # a quarter of it, 1 round

- **batch**: the render corpus's requests (all templates) through ``chatcodec batch`` with
  ``--jobs 1`` and ``--jobs 2`` (a subprocess each: start-up and the workers' template
  compiles included, as a user pays them); the outputs must be byte-identical.
- **batch --checkpoint**: the Qwen2.5 conversations of the corpus, repeated (11,264), encoded
  by ``chatcodec batch --checkpoint`` with ``--jobs 1`` and ``--jobs 2`` on a checkpoint folder
  written for the run (tests/_tokenizer.py); outputs identical, and their token ids those
  ``Dataset.map`` gives below.
- **check-data**: the Qwen2.5 conversations of the corpus, repeated (11,264), through
  ``chatcodec check-data`` with ``--jobs 1`` and ``--jobs 2``; outputs identical.
- **datasets**: ``Dataset.map(DatasetEncoder(...), batched=True, num_proc=1 | 2)`` over the
  Qwen2.5 conversations, repeated, on a checkpoint folder written for the run
  (tests/_tokenizer.py); the rows must be equal.

Each figure is the fastest of its rounds; the speed-up is time(1) / time(2). On a machine
whose two cores are shared, the speed-up is below 2 by what the other processes take.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests._tokenizer import write_checkpoint  # noqa: E402

TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"
NOW = 1741165623


def _cases(shared: Path) -> list[dict[str, Any]]:
    path = shared / "oracle" / "render" / "expectations.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _best(run: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(rounds):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


def _command(args: list[str], stdin: bytes = b"") -> bytes:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "chatcodec", *args],
        input=stdin,
        capture_output=True,
        env=env,
        check=False,
    )
    if done.returncode not in (0, 1, 2) or b"Traceback" in done.stderr:
        raise SystemExit(done.stderr.decode())
    return done.stdout


def _row(name: str, count: int, one: float, two: float, unit: str) -> None:
    print(
        f"{name:12} {count:6} {unit:14} 1 job {count / one:8.1f}/s   "
        f"2 jobs {count / two:8.1f}/s   speed-up {one / two:.2f}x"
    )


def bench_batch(shared: Path, cases: list[dict[str, Any]], rounds: int) -> None:
    data = "".join(json.dumps(case) + "\n" for case in cases).encode()
    templates = str(shared / "chat_templates")
    runs = {}
    for jobs in (1, 2):
        runs[jobs] = _best(
            lambda jobs=jobs: _command(["batch", "--templates", templates, "-j", str(jobs)], data),
            rounds,
        )
    if runs[1][1] != runs[2][1]:
        raise SystemExit("batch: --jobs 2 wrote other lines than --jobs 1")
    _row("batch", len(cases), runs[1][0], runs[2][0], "requests")


def _conversations(cases: list[dict[str, Any]], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        if case["template"] == TEMPLATE and "error" not in case:
            if not case["continue_final_message"] and not case["kwargs"].get("enable_thinking"):
                tools = json.dumps(case["tools"]) if case["tools"] else None
                rows.append({"messages": case["messages"], "tools": tools})
    return rows * repeat


def bench_check_data(shared: Path, rows: list[dict[str, Any]], rounds: int, folder: Path) -> None:
    path = folder / "conversations.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            tools = json.loads(row["tools"]) if row["tools"] else None
            out.write(json.dumps({"messages": row["messages"], "tools": tools}) + "\n")
    template = str(shared / "chat_templates" / TEMPLATE)
    base = ["check-data", template, str(path), "--eos-token", "<|im_end|>", "--json"]
    runs = {
        jobs: _best(lambda jobs=jobs: _command([*base, "-j", str(jobs)]), rounds) for jobs in (1, 2)
    }
    if runs[1][1] != runs[2][1]:
        raise SystemExit("check-data: --jobs 2 wrote other lines than --jobs 1")
    _row("check-data", len(rows), runs[1][0], runs[2][0], "conversations")


def bench_batch_encode(
    rows: list[dict[str, Any]], rounds: int, folder: Path, checkpoint: Path
) -> list[Any]:
    path = folder / "dataset.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    base = ["batch", "--checkpoint", str(checkpoint), "--now", str(NOW), str(path)]
    runs = {
        jobs: _best(lambda jobs=jobs: _command([*base, "-j", str(jobs)]), rounds) for jobs in (1, 2)
    }
    if runs[1][1] != runs[2][1]:
        raise SystemExit("batch --checkpoint: --jobs 2 wrote other lines than --jobs 1")
    lines = [json.loads(line) for line in runs[1][1].decode("utf-8").splitlines()]
    if len(lines) != len(rows) or any("error" in line for line in lines):
        raise SystemExit("batch --checkpoint: a row was not encoded")
    _row("batch enc", len(rows), runs[1][0], runs[2][0], "conversations")
    return [line["input_ids"] for line in lines]


def bench_datasets(
    rows: list[dict[str, Any]], rounds: int, checkpoint: Path, encoded: list[Any]
) -> None:
    try:
        import datasets
    except ImportError:
        print("datasets: not installed (pip install datasets), skipped")
        return
    from chatcodec.data import DatasetEncoder

    table = datasets.Dataset.from_list(
        [{"messages": json.dumps(r["messages"]), "tools": r["tools"]} for r in rows]
    )
    encoder = DatasetEncoder(str(checkpoint), now=NOW)
    datasets.disable_progress_bars()

    def run(processes: int) -> list[Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mapped = table.map(
                encoder,
                batched=True,
                batch_size=64,
                num_proc=processes if processes > 1 else None,
                load_from_cache_file=False,
                remove_columns=["messages", "tools"],
            )
        return list(mapped["input_ids"])

    one = _best(lambda: run(1), rounds)
    two = _best(lambda: run(2), rounds)
    if one[1] != two[1]:
        raise SystemExit("datasets: num_proc=2 gave other rows than one process")
    if one[1] != encoded:
        raise SystemExit("datasets: other token ids than batch --checkpoint")
    _row("datasets.map", len(rows), one[0], two[0], "conversations")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--quick", action="store_true", help="a quarter of the corpus, 1 round")
    args = parser.parse_args()
    cases = _cases(args.shared)
    rounds = 1 if args.quick else 2
    if args.quick:
        cases = cases[::4]
    print(f"cores: {os.cpu_count()}, rounds: {rounds} (fastest kept)")
    bench_batch(args.shared, cases, rounds)
    rows = _conversations(_cases(args.shared), 64 if args.quick else 256)
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = Path(scratch) / "checkpoint"
        source = (args.shared / "chat_templates" / TEMPLATE).read_text(encoding="utf-8")
        write_checkpoint(checkpoint, source, {"eos_token": "<|im_end|>"})
        encoded = bench_batch_encode(rows, rounds, Path(scratch), checkpoint)
        bench_check_data(args.shared, rows, rounds, Path(scratch))
        bench_datasets(rows, rounds, checkpoint, encoded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
