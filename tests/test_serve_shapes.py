"""Responses keep the shape clients read (issue 41), and /openapi.json documents every field they carry.

``fixtures/api_shapes.json`` holds the shape of each response (its field names, in order, and their
nesting; not the values) as the API sent them before its responses were built as protocol models: recorded
at commit dc2f9c1 with ``WETQA_RECORD_API_SHAPES=tests/fixtures/api_shapes.json pytest -m integration
tests/test_serve_shapes.py``. The responses now come from the models; their shapes must be the same.
Fields added since, each recorded with the same command and named in the CHANGELOG: the chunk view's
``text_start``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from wetqa.generation import GeneratorConfig, Pipeline
from wetqa.generation.backends.extractive import ExtractiveBackend
from wetqa.retrieval import open_index

from .conftest import FIXTURES
from .serving import LiveServer, make_app, served_pipeline
from .test_serve_streaming import StructuredLocalModel
from .test_timetravel import two_versions  # noqa: F401  # the two-version index (a module fixture)

pytestmark = pytest.mark.integration

SHAPES = FIXTURES / "api_shapes.json"
RECORD = os.environ.get("WETQA_RECORD_API_SHAPES")  # a path: write the shapes there instead of comparing
QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"
CHAT = {"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": QUESTION}]}
SEARCH = {"query": "gezag ouder rechtbank vreemdeling verblijfsvergunning", "k": 5}
# The model of each response: the name of its schema among /openapi.json's components.
MODEL_OF = {
    "chat": "ChatCompletion",
    "chat_dated": "ChatCompletion",
    "abstained": "ChatCompletion",
    "search": "SearchResponse",
    "search_dated": "SearchResponse",
    "chunk": "ChunkResponse",
    "versions": "ArticleVersions",
    "models": "ModelList",
    "health": "Health",
}


def shape(value):
    """The field names, in order, and their nesting: an object is its [name, shape] pairs; a list the
    distinct shapes of its items; anything else a value."""
    if isinstance(value, dict):
        return [[key, shape(item)] for key, item in value.items()]
    if isinstance(value, list):
        distinct = {json.dumps(shape(item)) for item in value}
        return [json.loads(s) for s in sorted(distinct)]
    return "value"


def shapes_of(bodies: dict) -> dict:
    """Each response's shape; a stream's, the shape of each event in the order they come."""
    return {
        name: [e if e == "[DONE]" else shape(e) for e in body] if name.startswith("stream") else shape(body)
        for name, body in bodies.items()
    }


def events(response: httpx.Response) -> list:
    """A stream's events, each parsed (the last is the text [DONE])."""
    out = []
    for line in response.text.split("\n\n"):
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def served(index, name, backend=None, **options):
    p = served_pipeline(name, index, GeneratorConfig("extractive"), k=3)
    p.pipeline = Pipeline(open_index(index), backend or ExtractiveBackend(), k=3, **options)
    return p


def responses(bm25s_index, articles_index, versions_index) -> dict:
    """The body of each kind of response the API gives (streams: their events), by name."""
    out: dict = {}
    with LiveServer(make_app([served(bm25s_index, "wetqa-bm25s-extractive")], max_question_chars=500)) as s:
        u = s.url
        out["chat"] = httpx.post(u + "/v1/chat/completions", json=CHAT).json()
        out["stream"] = events(httpx.post(u + "/v1/chat/completions", json={**CHAT, "stream": True}))
        with_usage = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        out["stream_usage"] = events(httpx.post(u + "/v1/chat/completions", json=with_usage))
        out["search"] = httpx.post(u + "/v1/search", json=SEARCH).json()
        out["search_dated"] = httpx.post(u + "/v1/search", json={**SEARCH, "date": "2010-06-01"}).json()
        out["chunk"] = httpx.get(u + f"/v1/chunks/{out['search']['data'][0]['id']}").json()
        out["models"] = httpx.get(u + "/v1/models").json()
        out["health"] = httpx.get(u + "/health").json()
        errors = {
            "validation": httpx.post(u + "/v1/search", json={**SEARCH, "k": True}),
            "not_json": httpx.post(u + "/v1/search", content=b"{", headers={"content-type": "application/json"}),
            "form": httpx.post(u + "/v1/search", content=b"q=x", headers={"content-type": "text/plain"}),
            "model": httpx.post(u + "/v1/chat/completions", json={**CHAT, "model": "x"}),
            "scope": httpx.post(u + "/v1/search", json={**SEARCH, "laws": ["BWBR9990001"], "date": "2010-06-01"}),
            "chunk": httpx.get(u + "/v1/chunks/nope"),
            "route": httpx.get(u + "/v1/nothing"),
        }
        for name, r in errors.items():
            assert r.status_code >= 400, (name, r.text)
            out[f"error_{name}"] = r.json()
    structured = served(bm25s_index, "wetqa-bm25s-extractive", backend=StructuredLocalModel())
    with LiveServer(make_app([structured])) as s:
        out["stream_structured"] = events(httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "stream": True}))
    refusing = served(articles_index, "wetqa-bm25s-extractive", min_confidence=1.0)
    with LiveServer(make_app([refusing])) as s:
        out["abstained"] = httpx.post(s.url + "/v1/chat/completions", json=CHAT).json()
        out["stream_abstained"] = events(httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "stream": True}))
    with LiveServer(make_app([served(versions_index, "wetqa-bm25s-extractive")], api_key="k")) as s:
        key = {"Authorization": "Bearer k"}
        versions = s.url + "/v1/articles/BWBR9990001/Artikel 266/versions"
        out["versions"] = httpx.get(versions, params={"from": "2012-10-04"}, headers=key).json()
        out["error_version"] = httpx.get(versions, params={"from": "1900-01-01"}, headers=key).json()
        dated = httpx.post(s.url + "/v1/chat/completions", json={**CHAT, "date": "2012-10-04"}, headers=key)
        out["chat_dated"] = dated.json()
        out["error_key"] = httpx.get(s.url + "/v1/models").json()
    assert out["abstained"]["abstained"] and out["versions"]["changed"]
    assert any("sentence" in e for e in out["stream_structured"] if isinstance(e, dict))
    return out


@pytest.fixture(scope="module")
def bodies(bm25s_index, articles_index, two_versions):  # noqa: F811
    _, versions_index = two_versions
    return responses(bm25s_index, articles_index, versions_index)


def test_every_response_has_the_shape_it_had_before_the_protocol_models(bodies):
    shapes = shapes_of(bodies)
    if RECORD:
        Path(RECORD).write_text(json.dumps(shapes, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        pytest.skip(f"recorded the shapes in {RECORD}")
    recorded = json.loads(SHAPES.read_text(encoding="utf-8"))
    assert sorted(shapes) == sorted(recorded)
    for name in recorded:
        assert shapes[name] == recorded[name], name


def undocumented(value, schema: dict, schemas: dict, where: str = "") -> list[str]:
    """The fields of ``value`` its schema does not declare with a description (a collection's own names for a
    document are declared by a described ``additionalProperties``)."""
    if "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in schema:
        if value is None:
            return []
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        return min((undocumented(value, o, schemas, where) for o in options), key=len)
    if isinstance(value, list):
        return [x for item in value for x in undocumented(item, schema.get("items", {}), schemas, where)]
    if not isinstance(value, dict):
        return []
    properties, extra = schema.get("properties", {}), schema.get("additionalProperties")
    out = []
    for key, item in value.items():
        if key in properties:
            if not properties[key].get("description"):
                out.append(f"{where}.{key} (no description)")
            out += undocumented(item, properties[key], schemas, f"{where}.{key}")
        elif not (isinstance(extra, dict) and extra.get("description") and isinstance(item, str)):
            out.append(f"{where}.{key}")
    return out


def test_every_field_a_response_carries_is_documented(bodies, extractive_served):
    app = make_app([extractive_served()])
    schemas = app.openapi()["components"]["schemas"]
    missing = []
    for name, body in bodies.items():
        for event in body if name.startswith("stream") else [body]:
            if event == "[DONE]":
                continue
            model = "ErrorResponse" if name.startswith("error") or "error" in event else MODEL_OF.get(name)
            model = model or "ChatCompletionChunk"
            missing += [f"{name}: {model}{field}" for field in undocumented(event, schemas[model], schemas)]
    assert missing == []
