"""``wetqa serve``: the OpenAI-compatible endpoint and the web page.

Its flags are the pipeline spec's (the same as ``ask`` and ``generate``) and the server config's,
both derived from their dataclasses; nothing here imports FastAPI or uvicorn until the command runs.
"""

from __future__ import annotations

import argparse
import os

from wetqa.console import UsageError, requires


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from wetqa.generation.spec import PipelineSpec
    from wetqa.settings import add_arguments

    from .config import SERVER_SETTINGS

    p = sub.add_parser("serve", help="serve the OpenAI-compatible API and the web page")
    PipelineSpec.add_cli_args(p)
    add_arguments(p.add_argument_group("server"), SERVER_SETTINGS)
    p.set_defaults(func=cmd_serve)


def server_config(args: argparse.Namespace):
    from wetqa.settings import SettingError, build, given

    from .config import SERVER_SETTINGS, ServerConfig

    values = given(args, SERVER_SETTINGS)
    source = "--api-key"
    if "api_key" not in values and os.environ.get("WETQA_API_KEY") is not None:
        values["api_key"], source = os.environ["WETQA_API_KEY"], "WETQA_API_KEY"
    key = values.get("api_key")
    if key is not None and not key.strip():
        # An empty key matched no bearer token and let requests without one through: refuse to start.
        raise UsageError(f"{source} is an empty API key, which would turn authentication off; give a key or unset it")
    if key is not None and not (key.isascii() and key.isprintable() and " " not in key):
        # A header carries it: a key with a letter outside ASCII, a space or a new line no client can send.
        raise UsageError(f"{source}: an API key must be printable ASCII without spaces (an HTTP header carries it)")
    if "host" in values and not values["host"].strip():
        # An empty host made uvicorn listen on every interface while wetqa printed http://:PORT.
        raise UsageError("--host is empty: give an address (127.0.0.1 for this machine, 0.0.0.0 for every interface)")
    try:
        return build(ServerConfig, values)
    except SettingError as exc:
        raise UsageError(str(exc)) from None


def cmd_serve(args: argparse.Namespace) -> int:
    requires("fastapi", "uvicorn", command="wetqa serve")
    import signal

    import uvicorn

    from wetqa.generation.spec import PipelineSpec

    from .app import create_app
    from .pipelines import ServedPipeline, served_pipeline_name
    from .server import server_config as uvicorn_config

    config = server_config(args)
    spec = PipelineSpec.from_cli_args(args)
    # A server stopped by SIGTERM dies of it, as a service manager expects of a clean stop (uvicorn shuts
    # down, puts back this handler and signals itself again): not wetqa's "terminated", exit 143.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    served = ServedPipeline(config.name or served_pipeline_name(spec), spec)
    app = create_app([served.load()], config)
    # The socket first: a busy port is refused before "serving" is announced.
    sock = listening_socket(config.host, config.port)
    print(
        f"wetqa: serving {served.name} on http://{config.host}:{config.port} "
        f"(OpenAI base URL http://{config.host}:{config.port}/v1)"
    )
    uvicorn.Server(
        uvicorn_config(
            app,
            host=config.host,
            port=config.port,
            header_timeout=config.header_timeout,
            timeout_keep_alive=config.timeout_keep_alive,
        )
    ).run(sockets=[sock])
    return 0


def listening_socket(host: str, port: int):
    """A socket bound to ``host:port`` (as uvicorn binds it); a busy or forbidden address is a usage error."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; another server may be using it: "
            "pick another --port"
        ) from None
    sock.set_inheritable(True)
    return sock
