"""Loading a checkpoint: every on-disk shape gives a Codec that renders as transformers does."""

from __future__ import annotations

import functools
import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chatcodec import (
    ChatTemplate,
    CheckpointError,
    MissingExtraError,
    TemplateNotFoundError,
)
from chatcodec.checkpoint import find_checkpoint, load

from .conftest import read_jsonl, shared_path, template_source

LLAMA = "meta-llama-Llama-3.1-8B-Instruct.jinja"
QWEN = "Qwen-Qwen3-0.6B.jinja"
HERMES_TOOLS = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"

# Oracle cases whose context holds nothing but special tokens, so a loaded checkpoint must
# supply exactly those tokens for the render to match.
LLAMA_CASE = "meta-llama-Llama-3.1-8B-Instruct__tool_call_single__agp0"
QWEN_CASE = "Qwen-Qwen3-0.6B__system_user__agp1"
HERMES_CASE = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use__tool_call_single__agp1"
HELLO = [{"role": "user", "content": "hello"}]


@functools.cache
def _oracle() -> dict[str, dict[str, Any]]:
    path = shared_path("oracle", "render", "expectations.jsonl")
    return {case["id"]: case for case in read_jsonl(path)}


def oracle_case(case_id: str) -> dict[str, Any]:
    return _oracle()[case_id]


def render_case(render: Callable[..., str], case: dict[str, Any], **extra: Any) -> str:
    """Render an oracle case's request without its kwargs: the tokens must come from elsewhere."""
    return render(
        case["messages"],
        tools=case["tools"],
        documents=case["documents"],
        add_generation_prompt=case["add_generation_prompt"],
        continue_final_message=case["continue_final_message"],
        now=case["now_unix"],
        **extra,
    )


def added_token(content: str) -> dict[str, Any]:
    """An AddedToken as tokenizer_config.json serializes it."""
    return {
        "__type": "AddedToken",
        "content": content,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }


def write_files(folder: Path, files: dict[str, Any]) -> Path:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        path.write_text(text, encoding="utf-8")
    return folder


def llama_tokens() -> dict[str, Any]:
    case = oracle_case(LLAMA_CASE)
    return {
        "bos_token": added_token(case["kwargs"]["bos_token"]),
        "eos_token": added_token(case["kwargs"]["eos_token"]),
    }


# --- folders and files ---------------------------------------------------------------------


def _layout_jinja(folder: Path) -> Path:
    write_files(
        folder,
        {
            "chat_template.jinja": template_source(LLAMA),
            # a template file beats the config's own entry, as in transformers
            "tokenizer_config.json": {"chat_template": "{{ 'stale' }}", **llama_tokens()},
        },
    )
    return folder


def _layout_config_string(folder: Path) -> Path:
    write_files(
        folder,
        {"tokenizer_config.json": {"chat_template": template_source(LLAMA), **llama_tokens()}},
    )
    return folder


def _layout_legacy_special_tokens_map(folder: Path) -> Path:
    kwargs = oracle_case(LLAMA_CASE)["kwargs"]
    special_map = {name: {"content": token, "lstrip": False} for name, token in kwargs.items()}
    write_files(
        folder,
        {
            # the legacy map overrides the config when the config has no added_tokens_decoder
            "tokenizer_config.json": {
                "chat_template": template_source(LLAMA),
                "bos_token": "<s>",
                "eos_token": "</s>",
            },
            "special_tokens_map.json": special_map,
        },
    )
    return folder


def _layout_processor_json(folder: Path) -> Path:
    write_files(
        folder,
        {
            "chat_template.json": {"chat_template": template_source(LLAMA)},
            "tokenizer_config.json": llama_tokens(),
        },
    )
    return folder


def _layout_tokenizer_config_path(folder: Path) -> Path:
    return _layout_config_string(folder) / "tokenizer_config.json"


def _layout_jinja_path(folder: Path) -> Path:
    # the special tokens come from the tokenizer files beside the template
    return _layout_jinja(folder) / "chat_template.jinja"


LAYOUTS = {
    "chat_template.jinja": _layout_jinja,
    "tokenizer_config string": _layout_config_string,
    "special_tokens_map.json": _layout_legacy_special_tokens_map,
    "chat_template.json": _layout_processor_json,
    "path to tokenizer_config.json": _layout_tokenizer_config_path,
    "path to a .jinja file": _layout_jinja_path,
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_layout_renders_the_oracle_prompt(tmp_path: Path, layout: str) -> None:
    case = oracle_case(LLAMA_CASE)
    target = LAYOUTS[layout](tmp_path)

    codec = load(target)

    assert render_case(codec.render, case) == case["expected"]
    assert codec.special_tokens == case["kwargs"]
    assert codec.origin is not None and str(tmp_path) in codec.origin


def test_a_str_path_and_a_path_object_load_alike(tmp_path: Path) -> None:
    _layout_jinja(tmp_path)
    by_str, by_path = find_checkpoint(str(tmp_path)), find_checkpoint(tmp_path)
    assert by_str == by_path
    assert by_path.kind == "folder"
    assert by_path.template_files == {"default": str(tmp_path / "chat_template.jinja")}
    assert by_path.files_read == (
        tmp_path / "chat_template.jinja",
        tmp_path / "tokenizer_config.json",
    )
    assert by_path.template_names == ()


def test_additional_chat_templates_follow_transformers_selection(tmp_path: Path) -> None:
    hermes, qwen = oracle_case(HERMES_CASE), oracle_case(QWEN_CASE)
    write_files(
        tmp_path,
        {
            "chat_template.jinja": template_source(QWEN),
            "additional_chat_templates/tool_use.jinja": template_source(HERMES_TOOLS),
            "tokenizer_config.json": {
                "bos_token": added_token(hermes["kwargs"]["bos_token"]),
                "eos_token": added_token(hermes["kwargs"]["eos_token"]),
            },
        },
    )
    checkpoint = find_checkpoint(tmp_path)
    assert checkpoint.template_names == ("default", "tool_use")
    assert checkpoint.template_files["tool_use"].endswith(
        "additional_chat_templates/tool_use.jinja"
    )

    codec = load(tmp_path)
    assert render_case(codec.render, hermes) == hermes["expected"]  # tools given: tool_use
    assert render_case(codec.render, qwen) == qwen["expected"]  # no tools: default

    pinned = load(tmp_path, template_name="default")
    reference = ChatTemplate(template_source(QWEN), special_tokens=hermes["kwargs"])
    assert render_case(pinned.render, hermes) == render_case(reference.render, hermes)


def test_a_named_list_in_tokenizer_config_loads_by_name(tmp_path: Path) -> None:
    hermes, qwen = oracle_case(HERMES_CASE), oracle_case(QWEN_CASE)
    write_files(
        tmp_path,
        {
            "tokenizer_config.json": {
                "chat_template": [
                    {"name": "default", "template": template_source(QWEN)},
                    {"name": "tool_use", "template": template_source(HERMES_TOOLS)},
                ],
                "bos_token": hermes["kwargs"]["bos_token"],
                "eos_token": hermes["kwargs"]["eos_token"],
            }
        },
    )
    codec = load(tmp_path)
    assert render_case(codec.render, hermes) == hermes["expected"]
    assert render_case(codec.render, qwen) == qwen["expected"]
    assert render_case(codec.render, hermes, template_name="default") == render_case(
        ChatTemplate(template_source(QWEN), special_tokens=hermes["kwargs"]).render, hermes
    )


def test_a_named_list_with_only_default_stays_named(tmp_path: Path) -> None:
    # transformers flattens a lone chat_template.jinja, but keeps a one-entry list as a dict
    source = template_source(QWEN)
    write_files(
        tmp_path,
        {"tokenizer_config.json": {"chat_template": [{"name": "default", "template": source}]}},
    )
    checkpoint = find_checkpoint(tmp_path)
    assert checkpoint.templates == {"default": source}
    case = oracle_case(QWEN_CASE)
    assert render_case(load(tmp_path, template_name="default").render, case) == case["expected"]


# --- special tokens ------------------------------------------------------------------------
# Each expectation below was checked against transformers 5.23.0 AutoTokenizer.special_tokens_map.


def test_model_specific_tokens_join_the_named_ones(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "chat_template.jinja": "{{ bos_token }}{{ image_token }}{{ x_token }}{{ video_token }}",
            "tokenizer_config.json": {
                "bos_token": "<s>",
                "pad_token": None,
                "image_token": "<img>",
                "x_token": added_token("<x>"),
                "add_bos_token": True,
                "extra_special_tokens": {"video_token": "<vid>"},
                "additional_special_tokens": ["<unlisted>"],
            },
        },
    )
    codec = load(tmp_path)
    assert codec.special_tokens == {
        "bos_token": "<s>",
        "image_token": "<img>",
        "x_token": "<x>",
        "video_token": "<vid>",
    }
    assert codec.render(HELLO) == "<s><img><x><vid>"


def test_special_tokens_map_overrides_the_config_unless_it_has_added_tokens_decoder(
    tmp_path: Path,
) -> None:
    legacy = write_files(
        tmp_path / "legacy",
        {
            "chat_template.jinja": "{{ bos_token }}|{{ pad_token is defined }}",
            "tokenizer_config.json": {"bos_token": "<s>", "pad_token": "<pad>"},
            "special_tokens_map.json": {"bos_token": {"content": "<map>"}, "pad_token": None},
        },
    )
    assert load(legacy).render(HELLO) == "<map>|False"

    modern = write_files(
        tmp_path / "modern",
        {
            "chat_template.jinja": "{{ bos_token }}",
            "tokenizer_config.json": {
                "bos_token": "<s>",
                "added_tokens_decoder": {"0": {"content": "<s>", "special": True}},
            },
            "special_tokens_map.json": {"bos_token": "<map>"},
        },
    )
    checkpoint = find_checkpoint(modern)
    assert checkpoint.special_tokens == {"bos_token": "<s>"}
    assert modern / "special_tokens_map.json" not in checkpoint.files_read


# --- GGUF ----------------------------------------------------------------------------------


def write_gguf(
    path: Path,
    template: str | list[dict[str, str]] | None,
    tokens: list[str],
    bos: int | None = None,
    eos: int | None = None,
) -> Path:
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    if bos is not None:
        writer.add_bos_token_id(bos)
    if eos is not None:
        writer.add_eos_token_id(eos)
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def llama_vocabulary() -> list[str]:
    kwargs = oracle_case(LLAMA_CASE)["kwargs"]
    return ["!", "hello", kwargs["bos_token"], "<|start_header_id|>", kwargs["eos_token"]]


def test_a_gguf_file_renders_the_oracle_prompt(tmp_path: Path) -> None:
    case = oracle_case(LLAMA_CASE)
    path = write_gguf(tmp_path / "model.gguf", template_source(LLAMA), llama_vocabulary(), 2, 4)

    codec = load(path)

    assert codec.special_tokens == case["kwargs"]
    assert render_case(codec.render, case) == case["expected"]
    checkpoint = find_checkpoint(path)
    assert checkpoint.kind == "gguf"
    assert checkpoint.template_files == {"default": f"{path}#tokenizer.chat_template"}


def test_named_gguf_templates_follow_transformers_selection(tmp_path: Path) -> None:
    hermes, qwen = oracle_case(HERMES_CASE), oracle_case(QWEN_CASE)
    vocabulary = [hermes["kwargs"]["bos_token"], hermes["kwargs"]["eos_token"], "x"]
    path = write_gguf(
        tmp_path / "named.gguf",
        [
            {"name": "default", "template": template_source(QWEN)},
            {"name": "tool_use", "template": template_source(HERMES_TOOLS)},
        ],
        vocabulary,
        bos=0,
        eos=1,
    )
    checkpoint = find_checkpoint(path)
    assert checkpoint.template_names == ("default", "tool_use")
    assert checkpoint.template_files["tool_use"] == f"{path}#tokenizer.chat_template.tool_use"

    codec = load(path)
    assert render_case(codec.render, hermes) == hermes["expected"]
    assert render_case(codec.render, qwen) == qwen["expected"]


def test_a_folder_holding_one_gguf_file_loads_it(tmp_path: Path) -> None:
    case = oracle_case(LLAMA_CASE)
    write_gguf(tmp_path / "model-Q4_K_M.gguf", template_source(LLAMA), llama_vocabulary(), 2, 4)
    assert render_case(load(tmp_path).render, case) == case["expected"]

    write_gguf(tmp_path / "model-Q8_0.gguf", template_source(LLAMA), llama_vocabulary(), 2, 4)
    with pytest.raises(CheckpointError, match="model-Q4_K_M.gguf, model-Q8_0.gguf"):
        load(tmp_path)


def test_a_gguf_file_without_a_template_says_which_keys_it_read(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "bare.gguf", None, ["a", "b"], bos=0)
    with pytest.raises(CheckpointError) as caught:
        load(path)
    message = str(caught.value)
    assert str(path) in message
    assert "tokenizer.chat_template" in message and "tokenizer.chat_templates" in message


def test_a_gguf_special_token_id_outside_the_vocabulary_is_a_checkpoint_error(
    tmp_path: Path,
) -> None:
    path = write_gguf(tmp_path / "odd.gguf", "{{ bos_token }}", ["a", "b"], bos=7)
    with pytest.raises(CheckpointError, match=r"tokenizer\.ggml\.bos_token_id = 7 .* 2 tokens"):
        load(path)


def test_a_corrupt_gguf_file_is_a_checkpoint_error(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    path = tmp_path / "cut.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00\xff")
    with pytest.raises(CheckpointError, match="not a readable GGUF file"):
        load(path)


def test_reading_gguf_without_the_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_gguf(tmp_path / "model.gguf", "{{ bos_token }}", ["<s>"], bos=0)
    monkeypatch.setitem(sys.modules, "gguf", None)  # makes `import gguf` fail
    with pytest.raises(MissingExtraError) as caught:
        load(path)
    assert caught.value.extra == "gguf"
    assert "chatcodec[gguf]" in str(caught.value)


# --- Hugging Face cache --------------------------------------------------------------------

COMMIT = "c1ab2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a"


def write_hub_cache(cache: Path, repo_id: str, files: dict[str, Any]) -> Path:
    """A cache entry as huggingface_hub lays it out: blobs, a snapshot of symlinks, refs/main."""
    storage = cache / ("models--" + repo_id.replace("/", "--"))
    staged = write_files(storage / "staged", files)
    snapshot = storage / "snapshots" / COMMIT
    for index, file in enumerate(sorted(p for p in staged.rglob("*") if p.is_file())):
        blob = storage / "blobs" / f"{index:040x}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        file.rename(blob)
        link = snapshot / file.relative_to(staged)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(blob)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a network connection fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("chatcodec tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("huggingface_hub")
    cache = tmp_path / "hub"
    cache.mkdir()
    # huggingface_hub reads these once, at import: chatcodec must read them per call.
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def test_a_cached_repo_loads_by_id_offline(hub_cache: Path, offline: None) -> None:
    case = oracle_case(QWEN_CASE)
    snapshot = write_hub_cache(
        hub_cache,
        "Qwen/Qwen3-0.6B",
        {
            "chat_template.jinja": template_source(QWEN),
            "tokenizer_config.json": {"eos_token": added_token(case["kwargs"]["eos_token"])},
        },
    )

    codec = load("Qwen/Qwen3-0.6B")

    assert render_case(codec.render, case) == case["expected"]
    assert codec.special_tokens == case["kwargs"]
    checkpoint = find_checkpoint("Qwen/Qwen3-0.6B")
    assert (checkpoint.kind, checkpoint.repo_id, checkpoint.revision) == (
        "hub",
        "Qwen/Qwen3-0.6B",
        COMMIT,
    )
    assert checkpoint.path == snapshot
    assert codec.origin is not None and "Qwen/Qwen3-0.6B" in codec.origin and COMMIT in codec.origin


def test_the_cache_is_found_through_hf_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    pytest.importorskip("huggingface_hub")
    case = oracle_case(LLAMA_CASE)
    write_hub_cache(
        tmp_path / "home" / "hub",
        "meta-llama/Llama-3.1-8B-Instruct",
        {"tokenizer_config.json": {"chat_template": template_source(LLAMA), **llama_tokens()}},
    )
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))

    codec = load("meta-llama/Llama-3.1-8B-Instruct")

    assert render_case(codec.render, case) == case["expected"]


def test_a_repo_missing_from_the_cache_is_a_checkpoint_error(
    hub_cache: Path, offline: None
) -> None:
    with pytest.raises(CheckpointError) as caught:
        load("nobody/absent-model")
    message = str(caught.value)
    assert "nobody/absent-model" in message and str(hub_cache) in message
    assert "never downloads" in message


def test_a_repo_id_without_huggingface_hub_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(MissingExtraError) as caught:
        load("Qwen/Qwen3-0.6B-not-a-local-folder")
    assert caught.value.extra == "hub"
    assert "chatcodec[hub]" in str(caught.value)


# --- errors --------------------------------------------------------------------------------


def test_a_folder_without_a_template_lists_what_was_looked_for(tmp_path: Path) -> None:
    write_files(tmp_path, {"tokenizer_config.json": {"eos_token": "</s>"}})
    with pytest.raises(CheckpointError) as caught:
        load(tmp_path)
    message = str(caught.value)
    assert str(tmp_path) in message
    for looked_for in (
        "chat_template.jinja (absent)",
        "additional_chat_templates/*.jinja (none)",
        "tokenizer_config.json (no 'chat_template' entry)",
        "chat_template.json (absent)",
    ):
        assert looked_for in message


def test_bad_json_names_the_file(tmp_path: Path) -> None:
    write_files(tmp_path, {"tokenizer_config.json": '{"chat_template": "x",'})
    with pytest.raises(CheckpointError, match=r"tokenizer_config\.json is not valid JSON"):
        load(tmp_path)


def test_a_malformed_chat_template_entry_is_a_checkpoint_error(tmp_path: Path) -> None:
    write_files(tmp_path, {"tokenizer_config.json": {"chat_template": [{"name": "default"}]}})
    with pytest.raises(CheckpointError, match="'chat_template' entry of .*tokenizer_config.json"):
        load(tmp_path)


def test_a_template_that_is_not_utf8_is_a_checkpoint_error(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_bytes(b"{{ '\xff' }}")
    with pytest.raises(CheckpointError, match="cannot read .*chat_template.jinja"):
        load(tmp_path)


def test_an_unknown_template_name_lists_the_available_ones(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "chat_template.jinja": template_source(QWEN),
            "additional_chat_templates/tool_use.jinja": template_source(HERMES_TOOLS),
        },
    )
    with pytest.raises(TemplateNotFoundError, match=r"'rag'.*\['default', 'tool_use'\]"):
        load(tmp_path, template_name="rag")


def test_a_name_for_a_single_template_is_refused(tmp_path: Path) -> None:
    write_files(tmp_path, {"chat_template.jinja": template_source(QWEN)})
    with pytest.raises(TemplateNotFoundError, match="single unnamed chat template"):
        load(tmp_path, template_name="tool_use")
    case = oracle_case(QWEN_CASE)
    assert render_case(load(tmp_path, template_name="default").render, case) == case["expected"]


def test_paths_that_hold_no_checkpoint_are_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no file or folder"):
        load(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="no file or folder"):
        load(str(tmp_path / "missing" / "model.gguf"))
    (tmp_path / "weights.safetensors").write_bytes(b"\x00")
    with pytest.raises(CheckpointError, match="expected a checkpoint folder"):
        load(tmp_path / "weights.safetensors")
    write_files(tmp_path, {"config.json": {"model_type": "llama"}})
    with pytest.raises(CheckpointError, match="no 'chat_template' entry"):
        load(tmp_path / "config.json")
