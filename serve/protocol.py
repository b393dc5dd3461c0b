"""The API's wire format: requests, responses, stream chunks and errors, as pydantic models (vLLM's
``entrypoints/openai/protocol.py`` is the model).

Requests are validated against these models (anything else is a 400 in OpenAI's error shape) and turn
themselves into what the engine takes (:meth:`ScopeFields.to_scope`). Every response body is built as one
of the models here and serialised from it (:class:`~.responses.ModelResponse`: orjson of ``model_dump``);
the same models document it in ``/openapi.json``, every field with its description, so any OpenAI client,
and any generator of clients, knows what comes back.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr, model_serializer

from wetqa.retrieval import MAX_K, InvalidSetting
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
    type: Literal["text"] = Field(description="always text (a message's parts are read as text)")
    text: Text = Field(description="the part's text")


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer", "function"] = Field(
        description="who wrote it (function: the old form of tool); the last user message is the question"
    )
    content: Text | list[TextPart] | None = Field(default=None, description="the text, or its text parts")


class StreamOptions(BaseModel):
    include_usage: bool = Field(default=False, strict=True, description="the usage in a last chunk of its own")


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
    messages: list[Message] = Field(min_length=1, description="the conversation; the last user message is asked")
    # Strict: "true", "5" and true are not read as true, 5 and 1; NaN is no temperature.
    stream: bool = Field(default=False, strict=True, description="server-sent events of ChatCompletionChunk")
    stream_options: StreamOptions | None = Field(default=None, description="with stream: what else to send")
    temperature: float | None = Field(
        default=None, ge=0, le=2, strict=True, allow_inf_nan=False, description="sampling temperature, 0-2"
    )
    max_tokens: int | None = Field(default=None, ge=1, strict=True, description="the longest answer, in tokens")
    max_completion_tokens: int | None = Field(default=None, ge=1, strict=True, description="as max_tokens")
    n: int | None = Field(default=None, ge=1, strict=True, description="answers per request: only 1")
    seed: int | None = Field(default=None, strict=True, description="the sampling seed")
    stop: str | list[str] | None = Field(default=None, description="up to 4 texts that end the answer")
    user: str | None = Field(default=None, description="the end user (read, not used)")
    # OpenAI fields wetqa's answers have no place for (a client's JSON schema, tool calls, the tokens'
    # log-probabilities): read only to be refused by name (ChatService.sampling_of), never ignored.
    response_format: dict[str, Any] | None = Field(default=None, description='unsupported, but {"type": "text"}')
    tools: list[Any] | None = Field(default=None, description="unsupported: answers call no tools")
    logprobs: bool | None = Field(default=None, strict=True, description="unsupported, but false")
    top_logprobs: int | None = Field(default=None, ge=0, strict=True, description="unsupported, but 0")
    tool_choice: str | dict[str, Any] | None = Field(default=None, description='unsupported, but "none"')
    parallel_tool_calls: bool | None = Field(default=None, strict=True, description="unsupported, but false")
    functions: list[Any] | None = Field(default=None, description="unsupported (the old form of tools)")
    function_call: str | dict[str, Any] | None = Field(default=None, description='unsupported, but "none"')
    top_p: float | None = Field(
        default=None, ge=0, le=1, strict=True, allow_inf_nan=False, description="unsupported, but 1"
    )
    presence_penalty: float | None = Field(
        default=None, ge=-2, le=2, strict=True, allow_inf_nan=False, description="unsupported, but 0"
    )
    frequency_penalty: float | None = Field(
        default=None, ge=-2, le=2, strict=True, allow_inf_nan=False, description="unsupported, but 0"
    )
    logit_bias: dict[str, float] | None = Field(default=None, description="unsupported, but {}")
    reasoning_effort: str | None = Field(default=None, description="unsupported")
    # vLLM's sampling fields, which its clients send: the same.
    top_k: int | None = Field(default=None, strict=True, description="unsupported, but -1 or 0")
    min_p: float | None = Field(
        default=None, ge=0, le=1, strict=True, allow_inf_nan=False, description="unsupported, but 0"
    )
    repetition_penalty: float | None = Field(
        default=None, gt=0, strict=True, allow_inf_nan=False, description="unsupported, but 1"
    )
    modalities: list[str] | None = Field(default=None, description='unsupported, but ["text"]')
    audio: dict[str, Any] | None = Field(default=None, description="unsupported")
    prediction: dict[str, Any] | None = Field(default=None, description="unsupported")


class SearchRequest(ScopeFields):
    query: Text = Field(description="what to search the law for")
    model: str | None = Field(default=None, description="the pipeline whose retriever searches (default: the first)")
    k: int = Field(default=10, ge=1, le=MAX_K, strict=True, description=f"hits, at most {MAX_K}")


def text_of(content: str | list[TextPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(part.text for part in content)


# ----------------------------------------------------------------------------------------- responses
# Field order is the order on the wire (clients written against the dicts the API once sent read the same
# bytes). A model listing two bases takes the fields of the last one first (pydantic's reversed MRO).


class ErrorDetail(BaseModel):
    message: str = Field(description="what is wrong, in one line (never where an upstream lives)")
    type: str = Field(description="invalid_request_error, authentication_error, rate_limit_error, ...")
    param: str | None = Field(
        default=None, description="the request field the error is about, as the client wrote it (messages.0.content)"
    )
    code: str | None = Field(
        default=None, description="a machine-readable reason: model_not_found, unsupported_parameter, ..."
    )


class ErrorResponse(BaseModel):
    """OpenAI's error shape, for every status wetqa answers with an error (and an error event mid-stream)."""

    error: ErrorDetail = Field(description="the error")


class Usage(BaseModel):
    prompt_tokens: int = Field(description="tokens of the prompt (the extractive generator: words of the question)")
    completion_tokens: int = Field(description="tokens of the answer (the extractive generator: its words)")
    total_tokens: int = Field(description="prompt_tokens + completion_tokens")


def _describe_names(schema: dict[str, Any]) -> None:
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        extra["description"] = "the collection's own names for the document's id (its source's metadata)"


class DocumentNames(BaseModel):
    """A record of a document: beside its fields, the collection's own names for the document's id come as
    text fields of their own (its source's ``metadata``), so a client of that collection reads the id it
    knows (:func:`wetqa.corpus.sources.document_fields`)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_describe_names)
    __pydantic_extra__: dict[str, str] = Field(init=False)


class DocumentRef(DocumentNames):
    """Which document a record is of, first (the collection's own names for it last)."""

    collection: str = Field(description="the corpus source the document comes from (its registered name)")
    law_id: str = Field(description="the document's id in its collection")


class CitedArticle(DocumentNames):
    """An article as an answer offers it: its chunk, law, text, version and official link, with the
    collection's own names for the document right after ``law_id``."""

    id: str = Field(description="stable chunk id (GET /v1/chunks/{id} gives the whole article)")
    doc_id: str = Field(description="the chunk's positional id in the index (DOC0001, ...), as the prompt cites it")
    collection: str = Field(description="the corpus source the document comes from (its registered name)")
    law_id: str = Field(description="the document's id in its collection")
    law: str = Field(description="the law's title")
    article: str = Field(description="the article's label (Artikel 266, Bijlage 1)")
    text: str = Field(description="the chunk's text")
    version_date: str | None = Field(description="the date of the law version quoted (geldend op); None: not known")
    valid_until: str | None = Field(description="the day the next version began (None: the current text)")
    url: str = Field(description="the article's official text (for the BWB: wetten.overheid.nl), as of its version")

    # No return annotation: pydantic then documents the model's own fields (an annotation would replace them).
    @model_serializer(mode="wrap")
    def _names_beside_law_id(self, handler):
        out = handler(self)
        names = self.__pydantic_extra__
        if not names:
            return out
        ordered = {}
        for key, value in out.items():
            if key not in names:
                ordered[key] = value
                if key == "law_id":
                    ordered.update((name, out[name]) for name in names if name in out)
        return ordered


class RelatedArticle(CitedArticle):
    """An article offered, not cited, by an answer that abstained."""


class CitationOut(CitedArticle):
    """A source as the answer's citations list it: its [n], its article's link, version and sentences."""

    index: int = Field(description="the n of the [n] marker")
    sentences: list[str] = Field(description="the cited text's sentences (SentenceSupport.support indexes them)")


class _Indexed(BaseModel):
    index: int = Field(description="the n of the [n] marker")


class SentenceSource(CitedArticle, _Indexed):
    """A source of a streamed sentence: its [n] (numbered as the final citations are), then the article."""


class SentenceSupport(BaseModel):
    text: str = Field(description="a sentence of the answer")
    citation: int | None = Field(description="the citation this sentence rests on, if any")
    citations: list[int] = Field(
        default_factory=list, description="every citation of the sentence (a structured answer may give several)"
    )
    support: list[int] = Field(description="indices of the supporting sentences of that citation")
    supported: bool = Field(
        description="whether it rests on a source: a source sentence holds 30% of its content words (a text "
        "answer), or it names a source (a structured answer)"
    )
    lead: bool = Field(
        default=False, description="a line naming the cited article (it introduces the quote; not a claim)"
    )


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = Field(default="assistant", description="always assistant")
    content: str = Field(description="the answer with its inline [n] markers, then the source list (Bronnen: ...)")


class Choice(BaseModel):
    index: int = Field(description="always 0: one answer per request")
    message: AssistantMessage = Field(description="the answer")
    finish_reason: str = Field(description="stop, or length when max_tokens cut the answer")
    logprobs: None = Field(default=None, description="always null: no log-probabilities")


def cite(answer):
    from wetqa.generation.citing import cite as cite_stage

    answer.cited = cite_stage(answer)
    return answer.cited


class ConversationContext(BaseModel):
    turns: list[int] = Field(description="the messages read as the question's context (their indexes in messages)")
    standalone_question: str = Field(
        description="the question as it was searched: the last user message with the earlier questions it follows"
    )
    cited: list[str] = Field(description="the articles the earlier turns cite, as read from their text")


class ChatCompletion(BaseModel):
    """A whole answer: OpenAI's fields, and wetqa's citations and per-sentence support."""

    id: str = Field(description="the completion's id (chatcmpl-...)")
    object: Literal["chat.completion"] = Field(default="chat.completion", description="always chat.completion")
    created: int = Field(description="when the answer was asked for (Unix seconds)")
    model: str = Field(description="the pipeline that answered")
    choices: list[Choice] = Field(description="the one answer")
    usage: Usage = Field(description="tokens (or words) of the question and the answer")
    citations: list[CitationOut] = Field(description="the sources the answer cites, numbered as its [n] markers")
    sentences: list[SentenceSupport] = Field(description="each sentence of the answer with the source it rests on")
    confidence: float | None = Field(description="that the first retrieved article answers the question, 0-1")
    abstained: bool = Field(description="no article of the corpus answers it: the answer says so and cites nothing")
    related: list[RelatedArticle] = Field(description="when abstained: the closest articles, offered but not cited")
    date: str | None = Field(description="the day the question was asked of (the request's date; None: today)")
    validity_note: str | None = Field(
        description="one line when the answer rests on a text older than a year: the law may have changed since"
    )
    context: ConversationContext | None = Field(
        default=None,
        description="a follow-up in a conversation: the earlier turns it was read with; null when the last user "
        "message was read alone (a single question, or one that changed the subject)",
    )

    @classmethod
    def from_answer(cls, answer, *, id: str, created: int, model: str, content: str, usage: Usage) -> ChatCompletion:
        """The completion of a generation :class:`~wetqa.generation.Answer`: OpenAI's fields around its text,
        and wetqa's fields from the answer and its cite stage (:meth:`answer_fields`): one place, so a new answer
        field is the answer's and this model's."""
        choice = Choice(index=0, message=AssistantMessage(content=content), finish_reason=answer.finish_reason)
        return cls(id=id, created=created, model=model, choices=[choice], usage=usage, **answer_fields(answer))


def answer_fields(answer) -> dict[str, Any]:
    """The fields wetqa's answer adds to OpenAI's (a :class:`ChatCompletion`'s, and a stream's last chunk's),
    from the answer and its cite stage (``answer.cited``): the citations and each sentence's support, how sure it
    is, whether it abstained (then the related articles it offers), the day asked of, the note on an old text and
    the conversation context it was read in."""
    cited = answer.cited if answer.cited is not None else cite(answer)
    return dict(
        citations=[CitationOut.model_validate(c.to_json()) for c in cited.citations],
        sentences=[SentenceSupport.model_validate(s.to_json()) for s in cited.sentences],
        confidence=None if answer.confidence is None else round(answer.confidence, 4),
        abstained=answer.abstained,
        related=[RelatedArticle.model_validate(c.to_json()) for c in cited.related],
        date=answer.date,
        validity_note=answer.validity_note,
        context=answer.context,
    )


class SparseModel(BaseModel):
    """A model that sends only the fields it was given (and those of ``always``): a stream chunk carries
    what it has, as OpenAI's do (no ``"usage": null`` in every chunk)."""

    always: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _given_only(self, handler):  # unannotated, as CitedArticle's: the schema stays the model's
        given = self.model_fields_set | self.always
        return {key: value for key, value in handler(self).items() if key in given}


class Delta(SparseModel):
    role: Literal["assistant"] | None = Field(default=None, description="assistant, in the first chunk only")
    content: str | None = Field(default=None, description="the next piece of the answer's text")


class ChunkChoice(BaseModel):
    index: int = Field(description="always 0: one answer per request")
    delta: Delta = Field(description="what this chunk adds to the answer")
    finish_reason: str | None = Field(default=None, description="in the last chunk of the answer: stop or length")
    logprobs: None = Field(default=None, description="always null: no log-probabilities")


class StreamedSentenceOut(BaseModel):
    text: str = Field(description="the sentence as the model wrote it (without its markers)")
    citations: list[int] = Field(description="the n of its [n] markers (the final citations' index)")


class ChatCompletionChunk(SparseModel):
    """One server-sent event of a stream (``data: {...}``); the last carries citations and sentences.

    A structured answer streams sentence by sentence: each such chunk's content is one sentence with its
    [n] markers, and ``sentence`` / ``sources`` say which sources those are. Fields after ``choices`` are
    sent only in the chunks that carry them.
    """

    always: ClassVar[frozenset[str]] = frozenset({"id", "object", "created", "model", "choices"})

    id: str = Field(description="the completion's id, the same in every chunk")
    object: Literal["chat.completion.chunk"] = Field(
        default="chat.completion.chunk", description="always chat.completion.chunk"
    )
    created: int = Field(description="when the answer was asked for (Unix seconds)")
    model: str = Field(description="the pipeline that answers")
    choices: list[ChunkChoice] = Field(description="the one answer's piece (empty in the usage chunk)")
    usage: Usage | None = Field(
        default=None, description="in the last chunk, or with include_usage in a chunk of its own after it"
    )
    sentence: StreamedSentenceOut | None = Field(
        default=None, description="a structured answer's sentence of this chunk"
    )
    sources: list[SentenceSource] | None = Field(default=None, description="the sources of that sentence")
    citations: list[CitationOut] | None = Field(default=None, description="last chunk: as ChatCompletion.citations")
    sentences: list[SentenceSupport] | None = Field(default=None, description="last chunk: as ChatCompletion.sentences")
    confidence: float | None = Field(default=None, description="last chunk: as ChatCompletion.confidence")
    abstained: bool | None = Field(default=None, description="last chunk: as ChatCompletion.abstained")
    related: list[RelatedArticle] | None = Field(default=None, description="last chunk: as ChatCompletion.related")
    date: str | None = Field(default=None, description="last chunk: as ChatCompletion.date")
    validity_note: str | None = Field(default=None, description="last chunk: as ChatCompletion.validity_note")
    context: ConversationContext | None = Field(default=None, description="last chunk: as ChatCompletion.context")


class ModelCard(BaseModel):
    id: str = Field(description="the pipeline's name: what a request's model names")
    object: Literal["model"] = Field(default="model", description="always model")
    created: int = Field(default=0, description="always 0")
    owned_by: str = Field(default="wetqa", description="always wetqa")
    retriever: str | None = Field(description="the retriever's name (None: not loaded)")
    generator: str = Field(description="the generator, and its model after a colon (openai:Qwen/...)")
    k: int = Field(description="the retrieved chunks an answer is written from")


class ModelList(BaseModel):
    object: Literal["list"] = Field(default="list", description="always list")
    data: list[ModelCard] = Field(description="the served pipelines, the default first")


class _Ranked(BaseModel):
    rank: int = Field(description="1 for the best hit")
    score: float = Field(description="the retriever's score (higher is better; comparable within one search)")


class SearchHit(CitedArticle, _Ranked):
    """A retrieved chunk: its rank and score, then the article (as a citation gives it)."""


class SearchResponse(BaseModel):
    object: Literal["list"] = Field(default="list", description="always list")
    model: str = Field(description="the pipeline whose retriever searched")
    date: str | None = Field(description="the day searched as of (the request's date; None: today)")
    data: list[SearchHit] = Field(description="the hits, best first")


class ChunkResponse(DocumentRef):
    """A chunk with its whole article (the page's source view)."""

    id: str = Field(description="stable chunk id")
    doc_id: str = Field(description="the chunk's positional id in the index (DOC0001, ...)")
    law: str = Field(description="the law's title")
    article: str = Field(description="the article's label")
    path: str = Field(description="where the article stands in its law (Boek 1 > Titel 14 > ...)")
    text: str = Field(description="the chunk's text")
    article_text: str = Field(description="the whole article's text, its chunks in reading order")
    text_start: int = Field(
        description="where the chunk's text begins in article_text (a short chunk's words may stand earlier too)"
    )


class ArticleVersionModel(DocumentRef):
    law: str = Field(description="the law's title")
    article: str = Field(description="the article's label")
    version_date: str | None = Field(description="the day this text began to be in force (None: not known)")
    valid_until: str | None = Field(description="the day the next version began (None: the current text)")
    announced: bool = Field(description="published but not yet in force: it begins after today")
    expired: bool = Field(description="the article was expired (vervallen) in this version")
    text: str = Field(description="the article's text in this version")
    url: str = Field(description="the official text of this version")


class DiffPiece(BaseModel):
    op: Literal["equal", "delete", "insert"] = Field(description="kept, went (in from only) or came (in to only)")
    text: str = Field(description="the words, with the spaces after them")


class ArticleVersions(DocumentRef):
    """An article's versions in the index, oldest first, and the words that changed between two of them."""

    model_config = ConfigDict(serialize_by_alias=True)
    object: Literal["list"] = Field(default="list", description="always list")
    law: str = Field(description="the law's title")
    article: str = Field(description="the article's label")
    data: list[ArticleVersionModel] = Field(description="the versions, oldest first")
    from_: str | None = Field(alias="from", description="the version compared from (in force on ?from=, or the oldest)")
    to: str | None = Field(description="the version compared to (in force on ?to=, or the newest)")
    changed: bool = Field(description="whether any word changed between the two")
    diff: list[DiffPiece] = Field(description="the words of the two texts in reading order, each kept, gone or new")


class Health(BaseModel):
    status: Literal["ok"] = Field(default="ok", description="always ok: the server answers")
    models: list[str] = Field(description="the served pipelines' names")
