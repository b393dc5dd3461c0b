"""What a client of OpenAI's API may send that is not the usual request: bodies curl labels oddly, methods a
route does not take, a model looked up by its id, OpenAI fields no generator here honours, a browser's
preflight from the openai JS client. On a real uvicorn server, with the official openai client where it
has a call for it. (Found by a defect hunt against the running server; each failed before its fix.)"""

import json
import threading
import time

import httpx
import openai
import pytest

from .serving import LiveServer, make_app
from .test_serve import QUESTION, SlowExtractive, client, preset

MODEL = "wetqa-bm25s-extractive"
ASKED = [{"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def server(bm25s_index):
    with LiveServer(make_app([preset(bm25s_index)], max_question_chars=500)) as s:
        yield s


def _error(r: httpx.Response) -> dict:
    return r.json()["error"]


@pytest.mark.integration
def test_a_deeply_nested_body_is_a_400_not_a_500(server):
    # `curl -d` labels its body a form; a form body that parses as a JSON object is read as JSON. One nested
    # 3,000 deep broke the parser's recursion, and the server answered 500 with a traceback in its log.
    nested = "[" * 3000
    for path in ("/v1/chat/completions", "/v1/search"):
        r = httpx.post(server.url + path, content=nested, headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 400, r.text
        assert _error(r)["type"] == "invalid_request_error" and "nested too deeply" in _error(r)["message"], r.text
        r = httpx.post(server.url + path, content=nested, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text


@pytest.mark.integration
def test_a_json_body_sent_without_a_content_type_is_read_as_json(server):
    body = json.dumps({"model": MODEL, "messages": ASKED}).encode()
    r = httpx.post(server.url + "/v1/chat/completions", content=body)
    assert "content-type" not in r.request.headers
    assert r.status_code == 200, r.text
    assert "[1]" in r.json()["choices"][0]["message"]["content"]
    empty = httpx.post(server.url + "/v1/chat/completions", content=b"")  # said "invalid request: Field required"
    assert empty.status_code == 400 and _error(empty)["message"] == "invalid request: the body must be a JSON object"


@pytest.mark.integration
def test_a_method_a_route_does_not_take_is_405_with_the_methods_it_takes(server):
    r = httpx.put(server.url + "/v1/chat/completions")
    assert r.status_code == 405 and r.headers.get("allow") == "POST", r.headers
    r = httpx.delete(server.url + "/v1/models")
    assert r.status_code == 405 and r.headers.get("allow") == "GET", r.headers
    assert _error(r)["code"] == "method_not_allowed", r.text  # was the status as a string, "405"


@pytest.mark.integration
def test_a_route_that_does_not_exist_is_named_not_found_as_the_apps_own_404s_are(server):
    r = httpx.get(server.url + "/v1/no-such-route")
    assert r.status_code == 404 and _error(r)["code"] == "not_found", r.text  # was "404"
    r = httpx.get(server.url + "/v1/chunks/no-such-chunk")
    assert r.status_code == 404 and _error(r)["code"] == "not_found", r.text
    assert _error(r)["type"] == "invalid_request_error"


@pytest.mark.integration
def test_n_above_one_is_an_unsupported_parameter(server):
    with pytest.raises(openai.BadRequestError) as err:
        client(server).chat.completions.create(model=MODEL, messages=ASKED, n=2)
    assert err.value.body["code"] == "unsupported_parameter" and err.value.body["param"] == "n"


@pytest.mark.integration
def test_a_model_is_retrieved_by_its_id(server):
    model = client(server).models.retrieve(MODEL)
    assert model.id == MODEL and model.object == "model" and model.owned_by
    listed = client(server).models.list().data[0]
    assert model.model_dump() == listed.model_dump()
    with pytest.raises(openai.NotFoundError) as err:
        client(server).models.retrieve("no-such-model")
    assert err.value.body["code"] == "model_not_found" and "no-such-model" in err.value.message


@pytest.mark.integration
@pytest.mark.parametrize(
    "field, value",
    [
        ("top_p", 0.1),
        ("presence_penalty", 1.5),
        ("frequency_penalty", -0.5),
        ("logit_bias", {"1234": 5}),
        ("functions", [{"name": "f", "parameters": {"type": "object"}}]),
        ("function_call", "auto"),
        ("tool_choice", "required"),
        ("parallel_tool_calls", True),
        ("modalities", ["text", "audio"]),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("prediction", {"type": "content", "content": "x"}),
        ("reasoning_effort", "high"),
        ("top_k", 5),
        ("min_p", 0.1),
        ("repetition_penalty", 1.2),
    ],
)
def test_a_field_no_generator_here_honours_is_refused_by_name(server, field, value):
    # They were silently ignored: a client asking for top_p 0.1 got an answer sampled without it.
    with pytest.raises(openai.BadRequestError) as err:
        client(server).chat.completions.create(model=MODEL, messages=ASKED, extra_body={field: value})
    assert err.value.body["code"] == "unsupported_parameter" and err.value.body["param"] == field, err.value.body


@pytest.mark.integration
def test_the_neutral_values_of_those_fields_are_answered(server):
    neutral = {"top_p": 1, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "functions": [],
               "tool_choice": "none", "function_call": "none", "parallel_tool_calls": False, "modalities": ["text"],
               "top_k": -1, "min_p": 0, "repetition_penalty": 1, "metadata": {"run": "a"}, "store": False}  # fmt: skip
    resp = client(server).chat.completions.create(model=MODEL, messages=ASKED, extra_body=neutral)
    assert "[1]" in resp.choices[0].message.content
    # A bias of 0 moves no token (a client may send its default table of zeros); it was refused.
    resp = client(server).chat.completions.create(model=MODEL, messages=ASKED, logit_bias={"1234": 0, "99": 0.0})
    assert "[1]" in resp.choices[0].message.content


@pytest.mark.integration
def test_a_refused_request_for_a_busy_server_says_when_to_retry(bm25s_index):
    app = make_app([preset(bm25s_index, backend=SlowExtractive(1.5))], max_concurrency=1, timeout=5)
    with LiveServer(app) as s:
        first = threading.Thread(target=lambda: client(s).chat.completions.create(model=MODEL, messages=ASKED))
        first.start()
        time.sleep(0.5)
        r = httpx.post(s.url + "/v1/chat/completions", json={"model": MODEL, "messages": ASKED})
        first.join()
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1, r.headers


@pytest.mark.integration
def test_a_preflight_from_the_openai_js_client_is_allowed(bm25s_index):
    # The openai JS client sends its x-stainless-* headers from a browser too: the preflight refused them.
    with LiveServer(make_app([preset(bm25s_index)], api_key="k", cors_origins=["https://app.example"])) as s:
        asked = "authorization, content-type, x-stainless-os, x-stainless-lang, x-stainless-retry-count"
        pre = httpx.options(
            s.url + "/v1/chat/completions",
            headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": asked},
        )  # fmt: skip
        assert pre.status_code == 200, pre.text
        assert pre.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.options(
            s.url + "/v1/chat/completions",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": asked},
        )  # fmt: skip
        assert "access-control-allow-origin" not in other.headers


@pytest.mark.integration
def test_a_body_that_is_no_json_object_is_named_so(server):
    # It said "invalid request: : Input should be a valid dictionary ..." (an empty field name).
    for body in ("[]", '"x"', "3"):
        r = httpx.post(server.url + "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and _error(r)["message"] == "invalid request: the body must be a JSON object", (
            r.text
        )
        assert _error(r)["param"] is None


@pytest.mark.integration
def test_a_conversation_holding_a_function_message_is_answered(server):
    # OpenAI still takes the old "function" role in a conversation's history; it was a 400 on messages.0.role.
    history = [{"role": "function", "name": "lookup", "content": "x"}, *ASKED]
    resp = client(server).chat.completions.create(model=MODEL, messages=history)
    assert "[1]" in resp.choices[0].message.content


@pytest.mark.unit
def test_upstream_failures_are_told_apart_by_their_type_not_their_words():
    """A model server's 500 whose message says "timed out" is its error (502), not our deadline; a timeout or an
    overflow is known by its type whatever its message says."""
    from wetqa.generation import ContextOverflowError, GenerationError
    from wetqa.generation._base import UpstreamTimeout, raise_failure
    from wetqa.serve.errors import upstream_error

    assert upstream_error(GenerationError("model server error 500: the worker timed out")).status == 502
    assert upstream_error(GenerationError("model server error: context overflow in a tool call")).status == 502
    assert upstream_error(UpstreamTimeout("no answer from the model server")).status == 504
    assert upstream_error(ContextOverflowError("the prompt is too long for the window")).status == 400
    with pytest.raises(UpstreamTimeout):
        raise_failure("the model server did not answer", "timeout")
    with pytest.raises(ContextOverflowError):
        raise_failure("too long", "context_overflow")


@pytest.mark.integration
def test_a_scope_error_carries_a_code_and_an_empty_laws_list_is_refused_as_the_cli_refuses_it(server):
    """Scope errors had ``code: null``; ``"laws": []`` meant no filter while ``--laws ""`` is refused (issue 55, 20)."""
    bad = httpx.post(server.url + "/v1/search", json={"query": "gezag", "date": "1800-01-01"})
    assert bad.status_code == 400 and _error(bad)["code"] == "invalid_scope" and _error(bad)["param"] == "date"
    empty = httpx.post(server.url + "/v1/search", json={"query": "gezag", "laws": []})
    assert empty.status_code == 400 and _error(empty)["param"] == "laws" and _error(empty)["code"] == "invalid_scope"


@pytest.mark.integration
def test_a_long_chunk_id_is_not_echoed_whole(server):
    """A long id (100 KB in the report) came back whole in the 404 (issue 55, 21)."""
    r = httpx.get(server.url + "/v1/chunks/" + "x" * 8_000)
    assert r.status_code == 404 and len(_error(r)["message"]) < 300


@pytest.mark.integration
def test_head_on_a_get_route_is_answered_as_get_without_a_body(server):
    """HEAD on GET routes was a 405 (issue 55, 22)."""
    for path in ("/health", "/v1/models", "/"):
        head = httpx.head(server.url + path)
        assert head.status_code == 200 and head.content == b"", path


@pytest.mark.unit
def test_an_api_key_no_client_can_send_is_refused_at_start():
    """``--api-key 'sl€utel'`` started a server whose page never got in; a key with a new line 401'd every request
    (issue 55, 16)."""
    import subprocess
    import sys

    for key in ("sl€utel", "a\nb", "met spatie"):
        run = subprocess.run([sys.executable, "-m", "wetqa", "serve", "--api-key", key, "--port", "1"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 2 and "API key" in run.stderr and run.stderr.count("\n") == 1, (key, run.stderr)
