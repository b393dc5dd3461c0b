"""The API declared once (issue 41): a request's scope is RetrievalSpec's settings, turned into the retrieval
scope by the request model itself, and its errors carry the field they are about as data."""

from __future__ import annotations

import pickle

import pytest
from pydantic import BaseModel

from wetqa.retrieval import InvalidSetting, RetrievalSpec
from wetqa.retrieval._base import Named
from wetqa.retrieval.scope import DEFAULT_SCOPE, JURISDICTIONS, SCOPE_SETTINGS, Scope, ScopeError
from wetqa.retrieval.spec import RETRIEVAL_SETTINGS
from wetqa.serve.protocol import ChatRequest, ScopeFields, SearchRequest, check_scope_fields

pytestmark = pytest.mark.unit

CHAT = {"model": "m", "messages": [{"role": "user", "content": "gezag?"}]}


def test_the_scope_fields_are_the_retrieval_settings_described_as_declared_there():
    infos = {i.name: i for i in RETRIEVAL_SETTINGS}
    for model in (ChatRequest, SearchRequest):
        fields = [name for name in model.model_fields if name in SCOPE_SETTINGS]
        assert fields == list(SCOPE_SETTINGS)
        properties = model.model_json_schema()["properties"]
        for name in SCOPE_SETTINGS:
            assert properties[name]["description"].startswith(infos[name].help), name
    jurisdiction = ChatRequest.model_json_schema()["properties"]["jurisdiction"]["anyOf"][0]["enum"]
    assert tuple(jurisdiction) == JURISDICTIONS == infos["jurisdiction"].choices


def test_a_request_model_that_drifts_from_the_settings_is_refused():
    class Missing(BaseModel):
        kind: list[str] | None = None
        laws: list[str] | None = None
        date: str | None = None

    class Scalar(ScopeFields):
        kind: str | None = None  # the drift under test

    class OtherChoices(ScopeFields):
        jurisdiction: str | None = None  # no choices: any text

    for model, words in ((Missing, "declares the scope fields"), (Scalar, "kind"), (OtherChoices, "allows")):
        with pytest.raises(TypeError, match=words):
            check_scope_fields(model)


def test_a_request_turns_itself_into_the_scope_over_the_pipelines_own():
    base = Scope(kinds=("wet",), laws=(), jurisdiction="bes", date=None)
    plain = ChatRequest.model_validate(CHAT)
    assert plain.to_scope(base) is base and plain.to_scope() == DEFAULT_SCOPE
    asked = ChatRequest.model_validate({**CHAT, "laws": ["BWBR0001854"], "date": "2012-10-04"})
    assert asked.to_scope(base) == Scope(("wet",), ("BWBR0001854",), "bes", "2012-10-04")
    search = SearchRequest.model_validate({"query": "gezag", "kind": ["AMvB", "wet"], "jurisdiction": "all"})
    assert search.to_scope(base) == Scope(("AMvB", "wet"), (), "all", None)
    # The command line's scope is made the same way, from the same settings.
    spec = RetrievalSpec(kind=("wet",), jurisdiction="bes")
    assert spec.scope == base and DEFAULT_SCOPE.given(kind=["wet"], jurisdiction="bes") == base
    with pytest.raises(TypeError, match="no scope setting kinds"):
        DEFAULT_SCOPE.given(kinds=("wet",))


def test_a_scope_error_knows_its_setting_and_is_written_as_flag_or_field():
    error = ScopeError("date", Named("date"), " 1900-01-01 is before every version", " together with ", Named("laws"))
    assert error.setting == "date" and isinstance(error, InvalidSetting)
    assert str(error) == "--date 1900-01-01 is before every version together with --laws"  # the command line's
    assert ChatRequest.scope_message(error) == "date 1900-01-01 is before every version together with laws"
    assert ChatRequest.field_of("date") == "date"
    again = pickle.loads(pickle.dumps(error))  # a process pool hands it back whole
    assert (type(again), again.setting, str(again)) == (ScopeError, "date", str(error))
    with pytest.raises(ScopeError) as bad_day:
        Scope(date="2012-02-30")
    assert bad_day.value.setting == "date" and str(bad_day.value).startswith("--date: ")
    with pytest.raises(ScopeError) as bad_place:
        Scope(jurisdiction="mars")
    assert bad_place.value.setting == "jurisdiction"
    with pytest.raises(ScopeError) as bad_id:
        RetrievalSpec(laws=("gezag",)).validate()
    assert bad_id.value.setting == "laws" and str(bad_id.value).startswith("--laws: ")


def test_the_index_check_names_the_setting_that_empties_the_scope(articles_index):
    from wetqa.retrieval import open_index
    from wetqa.retrieval.scope import check_scope

    retriever = open_index(articles_index, rescore=False)
    cases = [
        (Scope(kinds=("verdrag",)), "kind", "--kind verdrag: no regulation of that kind"),
        (Scope(laws=("BWBR0000000",)), "laws", "--laws: BWBR0000000 not in this index"),
        (Scope(date="1900-01-01"), "date", "--date 1900-01-01 is before every version"),
        (Scope(jurisdiction="bes"), "jurisdiction", "--jurisdiction bes: the scope is empty"),
        (Scope(laws=("BWBR9990001",), date="2010-06-01"), "date", "--date 2010-06-01: the scope is empty"),
    ]
    for scope, setting, words in cases:
        with pytest.raises(ScopeError) as err:
            check_scope(retriever, scope)
        assert err.value.setting == setting and str(err.value).startswith(words), (scope, str(err.value))
        assert "--" not in SearchRequest.scope_message(err.value)


# ------------------------------------------------------------------------------------------- responses
ROUTES = {  # each route and the model of its 200 response
    ("post", "/v1/chat/completions"): "ChatCompletion",
    ("post", "/v1/search"): "SearchResponse",
    ("get", "/v1/models"): "ModelList",
    ("get", "/v1/models/{model}"): "ModelCard",
    ("get", "/v1/chunks/{chunk_id}"): "ChunkResponse",
    ("get", "/v1/articles/{law_id}/{article}/versions"): "ArticleVersions",
    ("get", "/health"): "Health",
}


def _refs(schema) -> set[str]:
    """The component names a schema refers to, anywhere in it."""
    if isinstance(schema, dict):
        own = {schema["$ref"].rsplit("/", 1)[1]} if isinstance(schema.get("$ref"), str) else set()
        return own.union(*(_refs(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_refs(v) for v in schema))
    return set()


def test_openapi_documents_each_routes_200_model_and_every_response_field(extractive_served):
    from fastapi.testclient import TestClient

    from .serving import make_app

    doc = TestClient(make_app([extractive_served()])).get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    operations = {(method, path): op for path, ops in doc["paths"].items() for method, op in ops.items()}
    assert set(operations) == set(ROUTES)
    responses = []
    for route, op in operations.items():
        ok = op["responses"]["200"]["content"]
        assert ok["application/json"]["schema"] == {"$ref": f"#/components/schemas/{ROUTES[route]}"}, route
        for status, response in op["responses"].items():
            assert status != "422", route  # wetqa answers an invalid request with 400, never FastAPI's 422
            if status != "200":
                assert response["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
            responses.append(response)
    stream = operations[("post", "/v1/chat/completions")]["responses"]["200"]["content"]["text/event-stream"]
    assert stream["schema"] == {"$ref": "#/components/schemas/ChatCompletionChunk"}
    # Every schema a response reaches, through any depth, is a component, and each of its fields is described.
    seen, todo = set(), _refs(responses)
    while todo:
        name = todo.pop()
        seen.add(name)
        assert name in schemas, f"{name} is referred to but not among the components"
        todo |= _refs(schemas[name]) - seen
    assert {"ChatCompletionChunk", "SentenceSource", "CitationOut", "Usage", "ErrorDetail"} <= seen
    undescribed = [
        f"{name}.{field}"
        for name in sorted(seen)
        for field, prop in schemas[name].get("properties", {}).items()
        if not prop.get("description")
    ]
    assert undescribed == []
    extras = [name for name in seen if isinstance(schemas[name].get("additionalProperties"), dict)]
    assert extras and all(schemas[name]["additionalProperties"].get("description") for name in extras)
    assert _refs(doc) <= set(schemas)  # no reference left dangling (the stream's schema once held its own $defs)
