"""Model backends shared by a server's threads: serialised where they must be, batched where it pays."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from wetqa.corpus import load_chunks
from wetqa.generation import Pipeline, make_backend, resolve_generator
from wetqa.retrieval import build_index, open_index
from wetqa.retrieval.models.batching import Batcher

from .serving import LiveServer, make_app, served_pipeline
from .tiny_models import tiny_llama_dir, tiny_sentence_transformer


class Overlap:
    """Wraps a callable and records how many calls ran at once."""

    def __init__(self, fn, before=None):
        self.fn, self.before = fn, before
        self.active = self.most = self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.active += 1
            self.calls += 1
            self.most = max(self.most, self.active)
            first = self.calls == 1
        try:
            if first and self.before is not None:
                self.before()
            return self.fn(*args, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.005)


@pytest.mark.unit
def test_concurrent_callers_share_one_call_and_calls_never_overlap():
    batcher: Batcher[int, int] = Batcher(lambda xs: [2 * x for x in xs])
    fn = Overlap(batcher._fn, before=lambda: wait_until(lambda: batcher.waiting >= 15))
    batcher._fn = fn
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: batcher([i, 100 + i]), range(16)))
    assert results == [[2 * i, 200 + 2 * i] for i in range(16)]  # each caller gets its own share, in order
    assert fn.most == 1 and batcher.calls == 2 and batcher.items == 32  # the first alone, then 15 together


@pytest.mark.unit
def test_an_error_reaches_every_caller_of_that_call_and_the_next_call_works():
    state = {"fail": True}

    def fn(xs):
        if state["fail"]:
            state["fail"] = False
            raise ValueError("model fell over")
        return xs

    batcher: Batcher[int, int] = Batcher(fn)
    with pytest.raises(ValueError, match="model fell over"):
        batcher([1])
    assert batcher([2, 3]) == [2, 3]
    with pytest.raises(RuntimeError, match="2 results for 1 items"):
        Batcher(lambda xs: [1, 2])([0])


@pytest.mark.unit
def test_a_job_larger_than_the_limit_goes_alone_and_others_are_not_starved():
    seen = []
    batcher: Batcher[int, int] = Batcher(lambda xs: (seen.append(len(xs)), xs)[1], max_items=4)
    assert batcher(list(range(10))) == list(range(10))
    assert seen == [10]


@pytest.fixture(scope="module")
def tiny_models(fixture_corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("concurrency")
    encoder = tiny_sentence_transformer(root / "st", [c.text for c in load_chunks(fixture_corpus)])
    dense = root / "dense"
    build_index(fixture_corpus, "dense", dense, {"model": str(encoder), "batch_size": 4}, progress=False)
    return dense, tiny_llama_dir(root / "llama")


QUESTIONS = [
    f"Wanneer kan de rechtbank het gezag van een ouder beëindigen, vraag {i} over {w}?"
    for i, w in enumerate(
        "gezag voogdij erfrecht testament huur koop ouder kind rechter schorsing misbruik bedreiging "
        "verzoek beslissing termijn beroep".split()
    )
]


@pytest.mark.integration
def test_sixteen_concurrent_requests_over_a_dense_index_and_a_transformers_generator(tiny_models):
    dense, llama = tiny_models
    cfg = resolve_generator("transformers", model=str(llama), max_tokens=8, temperature=0.0)
    pipeline = Pipeline(open_index(dense), make_backend(cfg), k=2)
    # What each question gets when asked alone (greedy decoding: deterministic).
    alone = {q: pipeline.ask(q).answer for q in QUESTIONS}
    served = served_pipeline("wetqa-dense-tiny", dense, cfg, k=2, pipeline=pipeline)
    encoder = pipeline.retriever.index.encoder  # the dense index's own query encoder (the pipeline's first stage)
    queries = encoder.query_batcher
    # Instruments around the real models: how many generate() calls overlap, and how many query
    # encodings there are once the first one waits until every other request has queued behind it.
    generate = Overlap(pipeline.backend.model.generate)
    pipeline.backend.model.generate = generate
    calls_before = queries.calls
    encoder._recent.clear()  # the questions were asked alone above: their kept vectors forgotten, encoded again
    encoder.model.encode = Overlap(encoder.model.encode, before=lambda: wait_until(lambda: queries.waiting >= 15))
    with LiveServer(make_app([served], max_concurrency=16, timeout=60)) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)

        def ask(q):
            r = client.chat.completions.create(model="wetqa-dense-tiny", messages=[{"role": "user", "content": q}])
            return r.model_extra["sentences"], r.choices[0].message.content

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(ask, QUESTIONS))
    for q, (sentences, _content) in zip(QUESTIONS, answers):
        assert " ".join(s["text"] for s in sentences).split() == alone[q].split()
    assert generate.calls == 16 and generate.most == 1  # one generate() at a time, none lost
    assert queries.calls - calls_before == 2  # 16 query encodings in two model calls: one, then fifteen


@pytest.mark.integration
def test_concurrent_reranking_is_one_cross_encoder_call_with_the_same_scores(bm25s_index, tmp_path):
    from wetqa.retrieval.ranking.rerankers import CrossEncoderReranker, RerankStage

    from .pipelines import after
    from .tiny_models import tiny_bert_dir

    first = open_index(bm25s_index)
    model = tiny_bert_dir(tmp_path / "ce", [c.text for c in first.chunks], num_labels=1, seed=3)
    reranker = CrossEncoderReranker(str(model))
    retriever = after(first, RerankStage(reranker, 8, "cross-encoder"))
    alone = {q: [(h.chunk.id, round(h.score, 5)) for h in retriever.search(q, k=4)] for q in QUESTIONS}
    calls_before = reranker.batcher.calls
    predict = Overlap(reranker.model.predict, before=lambda: wait_until(lambda: reranker.batcher.waiting >= 15))
    reranker.model.predict = predict
    with ThreadPoolExecutor(16) as pool:
        together = list(
            pool.map(lambda q: [(h.chunk.id, round(h.score, 5)) for h in retriever.search(q, k=4)], QUESTIONS)
        )
    assert together == [alone[q] for q in QUESTIONS]
    assert predict.most == 1 and reranker.batcher.calls - calls_before == 2


@pytest.mark.unit
def test_a_failing_item_fails_only_its_own_caller():
    """One poisoned and 8 innocent concurrent callers: the 8 get their results, the one its error."""
    import threading

    gate = threading.Event()

    def model(items):
        gate.wait(5)  # hold the first call so that the others queue into one batch behind it
        if "poison" in items:
            raise ValueError("cannot encode 'poison'")
        return [len(x) for x in items]

    batcher = Batcher(model)
    results, errors = {}, {}

    def call(text):
        try:
            results[text] = batcher([text])
        except ValueError as exc:
            errors[text] = str(exc)

    first = threading.Thread(target=call, args=("first",))
    first.start()
    wait_until(lambda: batcher.calls == 0 and batcher.waiting == 0 and batcher._busy)
    callers = [threading.Thread(target=call, args=(t,)) for t in ["poison", *(f"q{i}" for i in range(8))]]
    for t in callers:
        t.start()
    wait_until(lambda: batcher.waiting == 9)
    gate.set()
    for t in [first, *callers]:
        t.join(10)
    assert set(errors) == {"poison"} and "cannot encode" in errors["poison"]
    assert results == {"first": [5], **{f"q{i}": [2] for i in range(8)}}


@pytest.mark.integration
def test_one_poisoned_request_among_eight_on_a_dense_server(tiny_models):
    import httpx

    from wetqa.generation.backends.extractive import ExtractiveBackend

    dense, _ = tiny_models
    pipeline = Pipeline(open_index(dense), ExtractiveBackend(), k=2, min_confidence=0)
    served = served_pipeline("wetqa-dense-tiny", dense, k=2, pipeline=pipeline)
    with LiveServer(make_app([served], max_concurrency=16)) as server:

        def ask(content: str) -> int:
            # Written by hand: json.dumps cannot write the lone surrogate's escape sequence as the client sends it.
            body = '{"model": "wetqa-dense-tiny", "messages": [{"role": "user", "content": "' + content + '"}]}'
            r = httpx.post(
                server.url + "/v1/chat/completions",
                content=body,
                headers={"Content-Type": "application/json"},
                timeout=60,
            )
            return r.status_code

        from concurrent.futures import ThreadPoolExecutor

        contents = [
            "gezag \\ud800 ouder",
            *(f"Wanneer kan de rechtbank het gezag beëindigen, vraag {i}?" for i in range(8)),
        ]
        with ThreadPoolExecutor(9) as pool:
            codes = list(pool.map(ask, contents))
    assert codes == [400] + [200] * 8
