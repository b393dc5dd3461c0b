"""``wetqa serve``: the OpenAI-compatible endpoint and the web page."""

from __future__ import annotations

import argparse
import os

from wetqa.console import non_negative_float, port_number, positive_float, positive_int

from .server import HEADER_TIMEOUT


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from wetqa.generation.cli import add_generator_args

    p = sub.add_parser("serve", help="serve the OpenAI-compatible API and the web page")
    p.add_argument(
        "--index", action="append", metavar="DIR", help="index folder(s); several = hybrid (default $WETQA_HOME/index)"
    )
    add_generator_args(p)
    p.add_argument("--fusion", choices=("rrf", "interpolate"), default="rrf")
    p.add_argument(
        "--name", help="the model name clients use for this pipeline (default: wetqa-<retriever>-<generator>)"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8000)
    p.add_argument(
        "--api-key", default=os.environ.get("WETQA_API_KEY"), help="require this bearer key (or WETQA_API_KEY)"
    )
    p.add_argument("--max-concurrency", type=positive_int, default=16, help="requests answered at once; more get 429")
    p.add_argument(
        "--request-timeout", type=non_negative_float, default=120.0, help="seconds before a request gets 504"
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser pages from this origin (repeatable), e.g. https://app.example",
    )
    p.add_argument(
        "--timeout-keep-alive", type=non_negative_float, default=5.0, help="seconds an idle connection is kept open"
    )
    p.add_argument(
        "--no-docs", dest="docs", action="store_false", help="no interactive API docs at /docs (served offline)"
    )
    p.add_argument(
        "--header-timeout",
        type=positive_float,
        default=HEADER_TIMEOUT,
        help="seconds a request's headers may take to arrive; slower connections are closed",
    )
    p.add_argument(
        "--body-timeout",
        type=positive_float,
        default=30.0,
        help="seconds a request's body may take to arrive; slower ones get 408",
    )
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from wetqa.generation.cli import generator_config
    from wetqa.retrieval.cli import index_paths

    from .app import create_app
    from .pipelines import ServedPipeline, served_pipeline_name
    from .server import server_config

    cfg = generator_config(args)
    indexes = [str(p) for p in index_paths(args)]
    preset = ServedPipeline(
        args.name or served_pipeline_name(indexes, args.generator), indexes, cfg, args.k, args.fusion
    )
    app = create_app(
        [preset.load()],
        api_key=args.api_key,
        max_concurrency=args.max_concurrency,
        timeout=args.request_timeout,
        cors_origins=args.cors_origin,
        body_timeout=args.body_timeout,
        docs=args.docs,
    )
    print(
        f"wetqa: serving {preset.name} on http://{args.host}:{args.port} (OpenAI base URL http://{args.host}:{args.port}/v1)"
    )
    config = server_config(
        app,
        host=args.host,
        port=args.port,
        header_timeout=args.header_timeout,
        timeout_keep_alive=args.timeout_keep_alive,
    )
    uvicorn.Server(config).run()
    return 0
