"""Find a checkpoint's chat templates and special tokens: a folder, a file, a GGUF, a hub cache entry.

The folder rules are those of transformers 5.23.0 ``AutoTokenizer.from_pretrained``: template
files beat ``tokenizer_config.json``; ``special_tokens_map.json`` is read only when the config
has no ``added_tokens_decoder`` and then overrides it; the special tokens passed to a template
are the named ones (``bos_token`` ... ``mask_token``) plus every other ``*_token`` entry.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .codec import Codec
from .errors import CheckpointError, MissingExtraError, TemplateNotFoundError
from .template import Limits
from .tokenizer import (  # the tokenizer files' names, and transformers' named special tokens
    NAMED_SPECIAL_TOKENS,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
)

__all__ = ["Checkpoint", "find_checkpoint", "load"]

CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
# The processor's legacy file; the tokenizer ignores it, so it is only a fallback here.
PROCESSOR_CHAT_TEMPLATE_FILE = "chat_template.json"


# The ids transformers' GGUF tokenizer conversion maps back to token strings.
GGUF_SPECIAL_TOKEN_IDS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}
GGUF_TEMPLATE_KEY = "tokenizer.chat_template"
GGUF_TEMPLATE_NAMES_KEY = "tokenizer.chat_templates"
GGUF_TOKENS_KEY = "tokenizer.ggml.tokens"

TEMPLATE_SUFFIXES = (".jinja", ".jinja2", ".j2")
GGUF_MAGIC = b"GGUF"
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")

Kind = Literal["folder", "file", "gguf", "hub"]


@dataclass(frozen=True)
class Checkpoint:
    """Where a checkpoint's chat templates and special tokens were found, and what they are.

    ``templates`` is one template source, or named sources (``{"default": ..., "tool_use": ...}``)
    exactly as transformers would hold them: a lone ``chat_template.jinja`` (or GGUF default) is a
    string, a named list from ``tokenizer_config.json`` stays a dict even with one entry.
    ``template_files`` says where each template was read (``"default"`` for a lone one):
    a path, or a path and the key inside it (``tokenizer_config.json#chat_template``).
    """

    templates: str | dict[str, str]
    special_tokens: dict[str, str]
    origin: str
    kind: Kind
    path: Path
    template_files: dict[str, str] = field(default_factory=dict)
    files_read: tuple[Path, ...] = ()
    repo_id: str | None = None
    revision: str | None = None
    # what Codec.encode tokenizes with: the folder of a tokenizer.json, or the GGUF file
    tokenizer_path: Path | None = None

    @property
    def template_names(self) -> tuple[str, ...]:
        """The names a request may choose between; empty for a single unnamed template."""
        return () if isinstance(self.templates, str) else tuple(sorted(self.templates))

    def codec(self, template_name: str | None = None, limits: Limits | None = None) -> Codec:
        """A Codec rendering with these templates and special tokens."""
        if template_name is not None and isinstance(self.templates, str):
            if template_name != "default":
                raise TemplateNotFoundError(
                    f"{self.origin} has a single unnamed chat template, so there is no template "
                    f"named {template_name!r} to choose"
                )
            template_name = None
        if template_name is not None and template_name not in self.templates:
            raise TemplateNotFoundError(
                f"no chat template named {template_name!r} in {self.origin}; "
                f"available: {list(self.template_names)}"
            )
        return Codec(
            self.templates,
            special_tokens=self.special_tokens,
            template_name=template_name,
            limits=limits,
            origin=self.origin,
            tokenizer=self.tokenizer_path,
        )


def load(
    path_or_repo_id: str | os.PathLike[str],
    template_name: str | None = None,
    limits: Limits | None = None,
) -> Codec:
    """A Codec for a checkpoint folder, a template or config file, a GGUF file, or a cached repo id.

    ``template_name`` fixes which of several named templates is used; without it, each request
    picks as transformers does (``tool_use`` when tools are given, else ``default``).
    """
    return find_checkpoint(path_or_repo_id).codec(template_name, limits)


def find_checkpoint(path_or_repo_id: str | os.PathLike[str]) -> Checkpoint:
    """Locate and read a checkpoint's chat templates and special tokens, without rendering."""
    path = Path(path_or_repo_id)
    if path.is_dir():
        return _from_folder(path, kind="folder")
    if path.is_file():
        return _from_file(path)
    if path.exists():
        raise CheckpointError(f"{path} is neither a regular file nor a folder")
    text = os.fspath(path_or_repo_id)
    if isinstance(path_or_repo_id, str) and _looks_like_repo_id(text):
        return _from_hub_cache(text)
    raise CheckpointError(f"no file or folder at {text}")


# --- folders -----------------------------------------------------------------------------


class _Reads:
    """The files read for one checkpoint, in order (``Checkpoint.files_read``)."""

    def __init__(self) -> None:
        self.read: list[Path] = []

    def text(self, path: Path) -> str | None:
        """The file's text, or None when it is not there."""
        if not path.is_file():
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CheckpointError(f"cannot read {path}: {error}") from None
        self.read.append(path)
        return text

    def json_object(self, path: Path) -> dict[str, Any] | None:
        """The file's JSON object, or None when it is not there."""
        text = self.text(path)
        if text is None:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise CheckpointError(f"{path} is not valid JSON: {error}") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{path} holds a JSON {type(data).__name__}, not an object")
        return data


def _from_folder(
    folder: Path, kind: Kind, repo_id: str | None = None, revision: str | None = None
) -> Checkpoint:
    reads = _Reads()
    looked: list[str] = []  # what each template location held, for the error message
    found = _template_files(folder, reads, looked)
    config_path = folder / TOKENIZER_CONFIG_FILE
    config = reads.json_object(config_path)
    # Template files replace whatever the tokenizer config holds, as in transformers.
    if found is None:
        found = _chat_template_entry(config, config_path, looked)
    if found is None:
        processor_path = folder / PROCESSOR_CHAT_TEMPLATE_FILE
        found = _chat_template_entry(reads.json_object(processor_path), processor_path, looked)
    if found is None:
        ggufs = sorted(folder.glob("*.gguf"))
        if len(ggufs) == 1:
            return _from_gguf(ggufs[0], kind=kind, repo_id=repo_id, revision=revision)
        hint = ""
        if ggufs:
            hint = f"; it holds several GGUF files ({', '.join(p.name for p in ggufs)}): pass one"
        raise CheckpointError(f"no chat template in {folder}: looked for {', '.join(looked)}{hint}")
    templates, where = found
    return Checkpoint(
        templates=templates,
        special_tokens=_folder_special_tokens(folder, reads, config),
        origin=_origin(where, repo_id, revision),
        kind=kind,
        path=folder,
        template_files=where,
        files_read=tuple(reads.read),
        repo_id=repo_id,
        revision=revision,
        tokenizer_path=_tokenizer_folder(folder),
    )


_Found = tuple[str | dict[str, str], dict[str, str]]  # the templates, and where each was read


def _template_files(folder: Path, reads: _Reads, looked: list[str]) -> _Found | None:
    """``chat_template.jinja`` and ``additional_chat_templates/*.jinja``, when there are."""
    files: dict[str, str] = {}
    where: dict[str, str] = {}
    default = reads.text(folder / CHAT_TEMPLATE_FILE)
    if default is not None:
        files["default"] = default
        where["default"] = str(folder / CHAT_TEMPLATE_FILE)
    else:
        looked.append(f"{CHAT_TEMPLATE_FILE} (absent)")
    extra_dir = folder / CHAT_TEMPLATE_DIR
    for extra in sorted(extra_dir.glob("*.jinja")) if extra_dir.is_dir() else []:
        source = reads.text(extra)
        if source is not None:
            name = extra.name.removesuffix(".jinja")
            files[name] = source
            where[name] = str(extra)
    if not files:
        looked.append(f"{CHAT_TEMPLATE_DIR}/*.jinja (none)")
        return None
    return _flatten(files), where


def _chat_template_entry(
    data: Mapping[str, Any] | None, path: Path, looked: list[str]
) -> _Found | None:
    """The templates of a JSON file's ``chat_template`` entry, when it has one."""
    if data is None:
        looked.append(f"{path.name} (absent)")
        return None
    if data.get("chat_template") is None:
        looked.append(f"{path.name} (no 'chat_template' entry)")
        return None
    return _config_templates(data["chat_template"], path)


def _folder_special_tokens(
    folder: Path, reads: _Reads, config: Mapping[str, Any] | None
) -> dict[str, str]:
    """The tokenizer config's special tokens, over the legacy map when the config lacks them."""
    special_map = None
    if config is None or "added_tokens_decoder" not in config:
        special_map = reads.json_object(folder / SPECIAL_TOKENS_MAP_FILE)
    return _special_tokens(config, special_map)


def _tokenizer_folder(folder: Path) -> Path | None:
    """The folder, when it holds a ``tokenizer.json`` (what Codec.encode reads)."""
    return folder if (folder / TOKENIZER_FILE).is_file() else None


def _from_file(path: Path) -> Checkpoint:
    if path.suffix == ".gguf" or _has_gguf_magic(path):
        return _from_gguf(path, kind="gguf")
    # The special tokens come from the tokenizer files beside the template, as in its folder.
    folder = path.parent.parent if path.parent.name == CHAT_TEMPLATE_DIR else path.parent
    reads = _Reads()
    if path.suffix in TEMPLATE_SUFFIXES:
        source = reads.text(path)
        if source is None:
            raise CheckpointError(f"no file at {path}")
        templates: str | dict[str, str] = source
        where = {"default": str(path)}
        config = None
    elif path.suffix == ".json":
        config = reads.json_object(path)
        if config is None:
            raise CheckpointError(f"no file at {path}")
        if config.get("chat_template") is None:
            raise CheckpointError(f"no chat template in {path}: it has no 'chat_template' entry")
        templates, where = _config_templates(config["chat_template"], path)
    else:
        raise CheckpointError(
            f"cannot read a chat template from {path}: expected a checkpoint folder, a .gguf file, "
            f"a .json file with a 'chat_template' entry, or a {'/'.join(TEMPLATE_SUFFIXES)} file"
        )
    if path.name != TOKENIZER_CONFIG_FILE and (folder / TOKENIZER_CONFIG_FILE).is_file():
        config = reads.json_object(folder / TOKENIZER_CONFIG_FILE)
    return Checkpoint(
        templates=templates,
        special_tokens=_folder_special_tokens(folder, reads, config),
        origin=_origin(where, None, None),
        kind="file",
        path=path,
        template_files=where,
        files_read=tuple(reads.read),
        tokenizer_path=_tokenizer_folder(folder),
    )


def _config_templates(value: Any, path: Path) -> tuple[str | dict[str, str], dict[str, str]]:
    """The templates of a JSON ``chat_template`` entry: a string, or ``[{"name", "template"}]``.

    A list stays named even when it holds only ``default``, as transformers keeps it.
    """
    key = f"{path}#chat_template"
    if isinstance(value, str):
        return value, {"default": key}
    entries: list[tuple[Any, Any]]
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        entries = [(item.get("name"), item.get("template")) for item in value]
    elif isinstance(value, dict):
        entries = list(value.items())
    else:
        entries = [(None, None)]
    if not entries or not all(isinstance(n, str) and isinstance(t, str) for n, t in entries):
        raise CheckpointError(
            f"the 'chat_template' entry of {path} is neither a string nor a list of "
            '{"name": ..., "template": ...} objects with string values'
        )
    templates = {name: template for name, template in entries}
    return templates, {name: f"{key}[{name}]" for name in templates}


def _flatten(templates: dict[str, str]) -> str | dict[str, str]:
    # transformers keeps a lone default template file as a plain string
    if len(templates) == 1 and "default" in templates:
        return templates["default"]
    return templates


# --- special tokens ----------------------------------------------------------------------


def _token_text(value: Any, added_token_only: bool) -> str | None:
    """A token's string: plain, or the ``content`` of a serialized AddedToken."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        if not added_token_only or value.get("__type") == "AddedToken":
            return str(value["content"])
    return None


def _special_tokens(
    config: Mapping[str, Any] | None, special_map: Mapping[str, Any] | None
) -> dict[str, str]:
    """transformers' ``special_tokens_map``: the context a template sees for its tokens."""
    config = config or {}
    named: dict[str, str | None] = {}
    for key in NAMED_SPECIAL_TOKENS:
        named[key] = _token_text(config.get(key), added_token_only=False)
    # Any other `*_token` string (or AddedToken) is a model-specific special token.
    specific: dict[str, str] = {}
    for key, value in config.items():
        if key.endswith("_token") and key not in named:
            text = _token_text(value, added_token_only=True)
            if text is not None:
                specific[key] = text
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        specific.update(_tokens_of(extra))
    if special_map is not None:
        for key, value in special_map.items():
            if key in named:
                # the legacy map overrides the config's named tokens, null included
                named[key] = _token_text(value, added_token_only=False)
            elif key == "extra_special_tokens" and isinstance(value, dict):
                specific.update(_tokens_of(value))
            elif key.endswith("_token") and key not in specific:
                text = _token_text(value, added_token_only=False)
                if text is not None:
                    specific[key] = text
    tokens = {key: value for key, value in named.items() if value is not None}
    tokens.update(specific)
    return tokens


def _tokens_of(mapping: Mapping[str, Any]) -> dict[str, str]:
    found = {key: _token_text(value, added_token_only=False) for key, value in mapping.items()}
    return {key: value for key, value in found.items() if value is not None}


# --- GGUF --------------------------------------------------------------------------------


def _has_gguf_magic(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == GGUF_MAGIC
    except OSError:
        return False


def _from_gguf(
    path: Path, kind: Kind, repo_id: str | None = None, revision: str | None = None
) -> Checkpoint:
    metadata = _GGUFMetadata(path)
    templates: dict[str, str] = {}
    where: dict[str, str] = {}
    default = metadata.string(GGUF_TEMPLATE_KEY)
    if default is not None:
        templates["default"] = default
        where["default"] = f"{path}#{GGUF_TEMPLATE_KEY}"
    # Named templates are listed under tokenizer.chat_templates; keys not listed still count.
    prefix = GGUF_TEMPLATE_KEY + "."
    names = metadata.strings(GGUF_TEMPLATE_NAMES_KEY) or []
    names += [key.removeprefix(prefix) for key in metadata.fields if key.startswith(prefix)]
    for name in dict.fromkeys(names):
        source = metadata.string(prefix + name)
        if source is not None:
            templates[name] = source
            where[name] = f"{path}#{prefix}{name}"
    if not templates:
        raise CheckpointError(
            f"no chat template in the GGUF file {path}: looked for the metadata keys "
            f"{GGUF_TEMPLATE_KEY} and {prefix}<name> (names listed in {GGUF_TEMPLATE_NAMES_KEY})"
        )
    special_tokens = {
        name: token
        for name, key in GGUF_SPECIAL_TOKEN_IDS.items()
        if (token := metadata.token(key)) is not None
    }
    origin = _origin({"default": str(path)}, repo_id, revision)
    return Checkpoint(
        templates=_flatten(templates),
        special_tokens=special_tokens,
        origin=origin,
        kind=kind,
        path=path,
        template_files=where,
        files_read=(path,),
        repo_id=repo_id,
        revision=revision,
        tokenizer_path=path,
    )


class _GGUFMetadata:
    """The key/value metadata of a GGUF file, read with the ``gguf`` package."""

    def __init__(self, path: Path) -> None:
        try:
            import gguf
        except ImportError:
            raise MissingExtraError("gguf", "gguf", f"reading the GGUF file {path}") from None
        try:
            reader = gguf.GGUFReader(path)
        except Exception as error:  # the parser of an untrusted file may fail in any way
            raise CheckpointError(f"{path} is not a readable GGUF file: {error}") from None
        self.path = path
        self.fields: Mapping[str, Any] = reader.fields
        kinds = gguf.GGUFValueType
        self._string = [kinds.STRING]
        self._string_array = [kinds.ARRAY, kinds.STRING]
        self._integers = {
            kinds.UINT8, kinds.INT8, kinds.UINT16, kinds.INT16,
            kinds.UINT32, kinds.INT32, kinds.UINT64, kinds.INT64,
        }  # fmt: skip

    def _field(self, key: str, expected: str, ok: bool) -> None:
        if not ok:
            raise CheckpointError(f"{self.path}: the metadata key {key} is not {expected}")

    def string(self, key: str) -> str | None:
        found = self.fields.get(key)
        if found is None:
            return None
        self._field(key, "a string", list(found.types) == self._string)
        try:
            return bytes(found.parts[found.data[0]]).decode("utf-8")
        except UnicodeDecodeError as error:
            raise CheckpointError(
                f"{self.path}: the metadata key {key} is not UTF-8: {error}"
            ) from None

    def strings(self, key: str) -> list[str] | None:
        found = self.fields.get(key)
        if found is None:
            return None
        self._field(key, "a list of strings", list(found.types) == self._string_array)
        return [bytes(found.parts[index]).decode("utf-8", errors="replace") for index in found.data]

    def integer(self, key: str) -> int | None:
        found = self.fields.get(key)
        if found is None:
            return None
        types = list(found.types)
        self._field(key, "an integer", len(types) == 1 and types[0] in self._integers)
        return int(found.parts[found.data[0]][0])

    def token(self, key: str) -> str | None:
        """The vocabulary entry (tokenizer.ggml.tokens) whose id the key holds."""
        token_id = self.integer(key)
        if token_id is None:
            return None
        vocabulary = self.fields.get(GGUF_TOKENS_KEY)
        if vocabulary is None:
            raise CheckpointError(
                f"{self.path} gives {key} but no vocabulary ({GGUF_TOKENS_KEY}) to read it in"
            )
        self._field(
            GGUF_TOKENS_KEY, "a list of strings", list(vocabulary.types) == self._string_array
        )
        if not 0 <= token_id < len(vocabulary.data):
            raise CheckpointError(
                f"{self.path}: {key} = {token_id} is outside the vocabulary "
                f"({GGUF_TOKENS_KEY} has {len(vocabulary.data)} tokens)"
            )
        return bytes(vocabulary.parts[vocabulary.data[token_id]]).decode("utf-8", errors="replace")


# --- Hugging Face cache ------------------------------------------------------------------


def _looks_like_repo_id(text: str) -> bool:
    if text.endswith((".gguf", ".json", *TEMPLATE_SUFFIXES)):
        return False
    return _REPO_ID.fullmatch(text) is not None and ".." not in text


def _hub_cache_dir() -> Path:
    """The hub cache huggingface_hub would use, read from the environment now.

    huggingface_hub reads HF_HUB_CACHE / HF_HOME once, at import; reading them per call lets a
    process (or a test) point chatcodec at another cache after the import.
    """
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if not cache:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "huggingface",
        )
        cache = os.path.join(os.path.expanduser(os.path.expandvars(home)), "hub")
    return Path(os.path.expanduser(os.path.expandvars(cache)))


# Only these files are needed; asking for them alone keeps a partial download usable.
_HUB_PATTERNS = [
    CHAT_TEMPLATE_FILE,
    f"{CHAT_TEMPLATE_DIR}/*.jinja",
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    SPECIAL_TOKENS_MAP_FILE,
    PROCESSOR_CHAT_TEMPLATE_FILE,
    "*.gguf",
]


def _from_hub_cache(repo_id: str) -> Checkpoint:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise MissingExtraError(
            "huggingface_hub",
            "hub",
            f"loading {repo_id!r} by repo id from the Hugging Face cache "
            "(no file or folder of that name exists)",
        ) from None
    cache = _hub_cache_dir()
    storage = cache / ("models--" + repo_id.replace("/", "--"))
    try:
        snapshot = Path(
            snapshot_download(
                repo_id,
                cache_dir=cache,
                local_files_only=True,  # never the network
                allow_patterns=_HUB_PATTERNS,
            )
        )
    except (OSError, ValueError) as error:
        # A snapshot the cache knows to be partial is still read for what it has, as
        # transformers does offline (huggingface_hub's IncompleteSnapshotError).
        partial = getattr(error, "snapshot_path", None)
        if partial is None or not Path(partial).is_dir():
            raise CheckpointError(
                f"no file or folder at {repo_id}, and no snapshot of the repo {repo_id!r} in the "
                f"Hugging Face cache at {cache} (looked for {storage}/refs/main and its "
                f"snapshots/<commit>): chatcodec never downloads, so fetch it first "
                f"(hf download {repo_id})"
            ) from None
        snapshot = Path(partial)
    return _from_folder(snapshot, kind="hub", repo_id=repo_id, revision=snapshot.name)


# --- descriptions ------------------------------------------------------------------------


def _origin(where: Mapping[str, str], repo_id: str | None, revision: str | None) -> str:
    """One line naming where the templates were read."""
    first = where.get("default") or next(iter(where.values()))
    more = "" if len(where) == 1 else f" and {len(where) - 1} more"
    if repo_id is not None:
        return f"{repo_id} (Hugging Face cache, snapshot {revision}: {Path(first).name}{more})"
    return f"{first}{more}"
