"""The server's own settings, one frozen record; ``wetqa serve`` derives its flags from it."""

from __future__ import annotations

from dataclasses import dataclass

from wetqa.settings import setting, settings_of

HEADER_TIMEOUT = 10.0
HOUR, DAY = 3600.0, 86400.0


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = setting("127.0.0.1", "address to listen on")
    port: int = setting(8000, "port to listen on", minimum=0, maximum=65535, invalid="a port is 0-65535")
    name: str | None = setting(
        None, "the model name clients use for the pipeline (default wetqa-<retriever>-<generator>)"
    )
    api_key: str | None = setting(None, "require this bearer key (or WETQA_API_KEY)", metavar="KEY")
    max_concurrency: int = setting(16, "requests answered at once; more get 429", minimum=1)
    # Every deadline is finite: `inf` would turn the guard it is off (a slowloris client, an idle connection).
    request_timeout: float = setting(120.0, "seconds before a request gets 504", above=0, maximum=DAY)
    header_timeout: float = setting(
        HEADER_TIMEOUT,
        "seconds a request's headers may take to arrive; slower connections are closed",
        above=0,
        maximum=HOUR,
    )
    body_timeout: float = setting(
        30.0, "seconds a request's body may take to arrive; slower ones get 408", above=0, maximum=HOUR
    )
    timeout_keep_alive: float = setting(5.0, "seconds an idle connection is kept open", minimum=0, maximum=HOUR)
    max_question_chars: int = setting(2000, "longest question (characters) answered; longer ones get 413", minimum=1)
    max_body_bytes: int = setting(1_000_000, "largest request body (bytes); larger ones get 413", minimum=1)
    cors_origin: tuple[str, ...] = setting(
        (), "allow browser pages from this origin (repeatable), e.g. https://app.example", metavar="ORIGIN"
    )
    docs: bool = setting(True, "interactive API docs at /docs (served offline)")


SERVER_SETTINGS = settings_of(ServerConfig)
