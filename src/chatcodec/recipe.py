"""A picklable recipe for a Codec: what a worker process loads once (``--jobs``, the dataset
encoders of ``chatcodec.data``), since a compiled template does not cross processes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .codec import Codec

__all__ = ["CodecRecipe"]


@dataclass(frozen=True)
class CodecRecipe:
    """``load(checkpoint, template_name)``, with ``bos_token``/``eos_token`` in place of the
    checkpoint's own when given (as the command line's ``--bos-token``/``--eos-token``), and
    ``tokenizer`` (a folder, ``tokenizer.json`` or ``.gguf``) in place of its tokenizer."""

    checkpoint: str
    template_name: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None
    tokenizer: str | None = None

    def build(self) -> Codec:
        from .checkpoint import load
        from .codec import Codec

        codec = load(self.checkpoint, template_name=self.template_name)
        overrides = {
            name: value
            for name, value in (("bos_token", self.bos_token), ("eos_token", self.eos_token))
            if value is not None
        }
        if not overrides and self.tokenizer is None:
            return codec
        return Codec(
            codec.sources or codec.template.source,
            special_tokens={**codec.special_tokens, **overrides},
            template_name=codec.template_name,
            limits=codec.limits,
            origin=codec.origin,
            tokenizer=codec.tokenizer_source if self.tokenizer is None else self.tokenizer,
        )
