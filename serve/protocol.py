"""The API's wire format: requests, responses, stream chunks and errors, as pydantic models.

Requests are validated against these models (anything else is a 400 in OpenAI's error shape).
Responses are built as plain dicts and rendered with orjson on the hot path; their models here
document them in ``/openapi.json`` (each route declares its responses and error responses), so any
OpenAI client, and any generator of clients, knows what comes back.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr

from wetqa.retrieval._base import MAX_K, InvalidSetting
from wetqa.retrieval.scope import DEFAULT_SCOPE, SCOPE_SETTINGS, Jurisdiction, Scope
from wetqa.retrieval.spec import SCOPE_SETTING_INFOS

# ------------------------------------------------------------------------------------------ requests


def _unicode(text: str) -> str:
    """Text must be text: a lone surrogate ("\\ud800" in JSON) is a Python str, but no Unicode, and it broke
    the tokenizers and encoders further on (and, in a shared batch, other users' requests)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid Unicode (it holds a lone surrogate)") from None
    return text


Text = Annotated[StrictStr, AfterValidator(_unicode)]


class TextPart(BaseModel):
    type: Literal["text"]
    text: Text


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Text | list[TextPart] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = Field(default=False, strict=True)


def _day(text: str) -> str:
    from wetqa.console import check_day

    return check_day(text)


Day = Annotated[StrictStr, AfterValidator(_day)]


MAX_SCOPE_LAWS = 500  # a request names at most this many laws (each is checked against the index)


def scope_field(setting: str, **limits: Any) -> Any:
    """The request field of a scope setting, declared by RetrievalSpec's setting of that name (its help is
    the field's description); left out (None), the served pipeline's own setting holds. ``limits``: what
    one request may ask (a list's length)."""
    info = SCOPE_SETTING_INFOS[setting]
    return Field(default=None, description=f"{info.help}; left out: the served pipeline's setting", **limits)


class ScopeFields(BaseModel):
    """Which regulations the question is asked of (wetqa's own fields beside OpenAI's): the retrieval
    scope's settings, named and described as RetrievalSpec declares them (``--kind`` is ``kind``)."""

    kind: list[Text] | None = scope_field("kind", max_length=20)
    laws: list[Text] | None = scope_field("laws", max_length=MAX_SCOPE_LAWS)
    jurisdiction: Jurisdiction | None = scope_field("jurisdiction")
    date: Day | None = scope_field("date")

    def to_scope(self, base: Scope = DEFAULT_SCOPE) -> Scope:
        """The retrieval scope the request asks in: each scope field given over ``base`` (the served
        pipeline's). A value no scope can have is a :class:`ScopeError` naming its setting."""
        return base.given(**{setting: getattr(self, setting) for setting in SCOPE_SETTINGS})

    @classmethod
    def field_of(cls, setting: str) -> str:
        """The request field of a scope setting, as a client writes it (the API error's ``param``)."""
        field = cls.model_fields.get(setting)
        return (field.alias if field is not None else None) or setting

    @classmethod
    def scope_message(cls, error: InvalidSetting) -> str:
        """A scope error's message with each setting it names written as the request's field."""
        return error.message(cls.field_of)


def check_scope_fields(model: type[BaseModel]) -> None:
    """The scope fields of a request are the scope's settings, one to one: the same names, lists for the
    settings that are lists, the same choices (TypeError otherwise: caught when the module is imported)."""
    fields = {name: f for name, f in model.model_fields.items() if name in SCOPE_SETTINGS}
    if list(fields) != list(SCOPE_SETTINGS):
        raise TypeError(f"{model.__name__} declares the scope fields {list(fields)}, not {list(SCOPE_SETTINGS)}")
    properties = model.model_json_schema()["properties"]
    for name, info in SCOPE_SETTING_INFOS.items():
        schema = properties[name]
        kinds = {option.get("type") for option in schema["anyOf"]} - {"null"}
        if kinds != {"array" if info.kind is tuple else "string"}:
            raise TypeError(f"{model.__name__}.{name} is {kinds}; the setting {name} is a {info.kind.__name__}")
        choices = next((tuple(o["enum"]) for o in schema["anyOf"] if "enum" in o), None)
        if choices != info.choices:
            raise TypeError(f"{model.__name__}.{name} allows {choices}; the setting {name} allows {info.choices}")


check_scope_fields(ScopeFields)


class ChatRequest(ScopeFields):
    """OpenAI's chat completion request: the last user message is the question."""

    model: str = Field(description="the pipeline to answer with (GET /v1/models lists them)")
    messages: list[Message] = Field(min_length=1)
    # Strict: "true", "5" and true are not read as true, 5 and 1; NaN is no temperature.
    stream: bool = Field(default=False, strict=True)
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0, le=2, strict=True, allow_inf_nan=False)
    max_tokens: int | None = Field(default=None, ge=1, strict=True)
    max_completion_tokens: int | None = Field(default=None, ge=1, strict=True)
    n: int | None = Field(default=None, ge=1, strict=True)
    seed: int | None = Field(default=None, strict=True)
    stop: str | list[str] | None = None
    user: str | None = None
    # OpenAI fields wetqa's answers have no place for (a client's JSON schema, tool calls, the tokens'
    # log-probabilities): read only to be refused by name (ChatService.sampling_of), never ignored.
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    logprobs: bool | None = Field(default=None, strict=True)
    top_logprobs: int | None = Field(default=None, ge=0, strict=True)


class SearchRequest(ScopeFields):
    query: Text
    model: str | None = None
    k: int = Field(default=10, ge=1, le=MAX_K, strict=True, description=f"hits, at most {MAX_K}")


def text_of(content: str | list[TextPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(part.text for part in content)


# ----------------------------------------------------------------------------------------- responses


class ErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, rate_limit_error, ...")
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error shape, for every status wetqa answers with an error."""

    error: ErrorDetail


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class DocumentRef(BaseModel):
    """Which document a record is of: its collection and its id there. The collection's own names for it
    come beside them (extra fields its source declares), so a client of that collection reads the id it knows."""

    model_config = ConfigDict(extra="allow")
    collection: str = Field(description="the corpus source the document comes from (its registered name)")
    law_id: str = Field(description="the document's id in its collection")


class SentenceSource(DocumentRef):
    index: int = Field(description="the n of the [n] marker")
    id: str = Field(description="stable chunk id")
    doc_id: str
    law: str
    article: str
    text: str


class CitationOut(SentenceSource):
    """A source as the answer's citations list it: its [n], its article's link, version and sentences."""

    model_config = ConfigDict(extra="allow")
    url: str = Field(description="the article's official text (for the BWB: wetten.overheid.nl), as of its version")
    version_date: str | None = Field(None, description="the date of the law version quoted (geldend op)")
    sentences: list[str]


class RelatedArticle(DocumentRef):
    id: str = Field(description="stable chunk id (GET /v1/chunks/{id} gives the whole article)")
    doc_id: str
    law: str
    article: str
    text: str
    url: str


class SentenceSupport(BaseModel):
    text: str
    citation: int | None = Field(description="the citation this sentence rests on, if any")
    citations: list[int] = Field(
        default_factory=list, description="every citation of the sentence (a structured answer may give several)"
    )
    support: list[int] = Field(description="indices of the supporting sentences of that citation")
    supported: bool
    lead: bool = Field(False, description="a line naming the cited article (it introduces the quote; not a claim)")


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class ChatCompletion(BaseModel):
    """A whole answer: OpenAI's fields, and wetqa's citations and per-sentence support."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    citations: list[CitationOut]
    sentences: list[SentenceSupport]
    confidence: float | None = Field(description="that the first retrieved article answers the question, 0-1")
    abstained: bool = Field(description="no article of the corpus answers it: the answer says so and cites nothing")
    related: list[RelatedArticle] = Field(description="when abstained: the closest articles, offered but not cited")


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: str | None = None
    logprobs: None = None


class StreamedSentenceOut(BaseModel):
    text: str
    citations: list[int] = Field(description="the n of its [n] markers (the final citations' index)")


class ChatCompletionChunk(BaseModel):
    """One server-sent event of a stream (``data: {...}``); the last carries citations and sentences.

    A structured answer streams sentence by sentence: each such chunk's content is one sentence with its
    [n] markers, and ``sentence`` / ``sources`` say which sources those are.
    """

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    sentence: StreamedSentenceOut | None = None
    sources: list[SentenceSource] | None = None
    citations: list[CitationOut] | None = None
    sentences: list[SentenceSupport] | None = None
    confidence: float | None = None
    abstained: bool | None = None
    related: list[RelatedArticle] | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "wetqa"
    retriever: str | None = None
    generator: str
    k: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class SearchHit(DocumentRef):
    rank: int
    score: float
    id: str
    doc_id: str
    law: str
    article: str
    text: str


class SearchResponse(BaseModel):
    object: Literal["list"] = "list"
    model: str
    data: list[SearchHit]


class ChunkResponse(DocumentRef):
    id: str
    doc_id: str
    law: str
    article: str
    path: str
    text: str
    article_text: str


class ArticleVersionModel(DocumentRef):
    law: str
    article: str
    version_date: str | None = Field(description="the day this text began to be in force (None: not known)")
    valid_until: str | None = Field(description="the day the next version began (None: the current text)")
    announced: bool = Field(description="published but not yet in force: it begins after today")
    expired: bool
    text: str
    url: str


class DiffPiece(BaseModel):
    op: Literal["equal", "delete", "insert"]
    text: str


class ArticleVersions(DocumentRef):
    """An article's versions in the index, oldest first, and the words that changed between two of them."""

    object: Literal["list"] = "list"
    law: str
    article: str
    data: list[ArticleVersionModel]
    from_: str | None = Field(alias="from", description="the version compared from (in force on ?from=, or the oldest)")
    to: str | None = Field(description="the version compared to (in force on ?to=, or the newest)")
    changed: bool
    diff: list[DiffPiece]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    models: list[str]
