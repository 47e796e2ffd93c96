"""What ``chatcodec serve`` runs: the codec, the engine and the app, under uvicorn."""

from __future__ import annotations

import argparse
import logging

from ..errors import MissingExtraError
from .app import ServeConfig, create_app
from .engine import Engine
from .remote import RemoteEngine

__all__ = ["serve"]


def engine_of(args: argparse.Namespace) -> Engine:
    """The engine the command line names: ``--backend`` or the in-process GGUF."""
    if args.backend:
        return RemoteEngine(
            args.backend,
            kind=args.backend_kind,
            model=args.backend_model,
            timeout=args.timeout,
            stream=not args.backend_no_stream,
            max_tokens_default=args.max_tokens_default,
        )
    from .llama import LlamaEngine

    return LlamaEngine(
        args.checkpoint, n_ctx=args.n_ctx, n_threads=args.n_threads, timeout=args.timeout
    )


def serve(args: argparse.Namespace, codec_loader: object) -> int:
    """Serve until interrupted; ``codec_loader(args)`` gives the checkpoint's Codec."""
    try:
        import uvicorn
    except ImportError as exc:
        raise MissingExtraError("uvicorn", "server", "chatcodec serve") from exc
    assert callable(codec_loader)
    codec = codec_loader(args)
    engine = engine_of(args)
    config = ServeConfig(
        model_name=args.model_name or args.checkpoint,
        api_key=args.api_key,
        max_body=args.max_body,
        reasoning_field=args.reasoning_field,
        policy=args.policy,
        max_tokens_default=args.max_tokens_default,
        timeout=args.timeout,
        body_timeout=args.body_timeout,
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    app = create_app(codec, engine, config)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
