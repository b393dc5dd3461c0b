"""A conversation, not a single question: the last user message read in the context of the turns before it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wetqa.retrieval.conversation import (
    MAX_CONTEXT_CHARS,
    MAX_MESSAGES,
    Conversation,
    ConversationError,
    mentions_of,
    switches_topic,
)

WORK = "Hoeveel uur mag mijn baas mij per dag laten werken?"
CITED = (
    "Volgens artikel 5:7 van de Arbeidstijdenwet mag dat hoogstens 12 uur. [1]\n\nBronnen:\n"
    "[1] Arbeidstijdenwet, Artikel 5:7, tekst van 1 januari 2024 (DOC17850, BWBR0007671_2024-01-01_art5:7_1)"
)


def _chat(*turns):
    roles = ["user", "assistant"] * len(turns)
    return [{"role": r, "content": t} for r, t in zip(roles, turns)]


@pytest.mark.unit
def test_the_last_user_message_is_read_with_the_questions_before_it():
    conversation = Conversation.of(
        [{"role": "system", "content": "Je bent een jurist."}, *_chat(WORK, CITED, "en als het een nachtdienst is?")]
    )
    assert conversation.question == "en als het een nachtdienst is?" and conversation.ignored == 1
    context = conversation.context()
    assert context is not None
    assert context.questions == (WORK,)
    assert context.turns == (1, 2)  # the indexes of the messages as the client sent them (the system one is 0)
    assert context.standalone("en als het een nachtdienst is?").startswith("en als het een nachtdienst is? (eerder: ")
    # The article the answer cited, from its citation id and from its words.
    assert "BWBR0007671_2024-01-01_art5:7_1" in {m.chunk_id for m in context.mentions}
    assert "Artikel 5:7" in {m.article for m in context.mentions}
    assert Conversation.single(WORK).context() is None
    assert Conversation.of(_chat(WORK)).context() is None


@pytest.mark.unit
def test_articles_are_found_in_an_answers_text():
    found = mentions_of("Zie art. 7:610 BW en artikel 266 van Boek 1. Ook Artikel 3.12a geldt.")
    assert [m.article for m in found] == ["Artikel 7:610", "Artikel 266", "Artikel 3.12a"]
    assert "Boek 1" in found[1].law_text and "Boek 1" not in found[2].law_text
    assert mentions_of("Geen artikel hier, wel 12 uur.") == []


@pytest.mark.unit
def test_a_message_that_changes_the_subject_drops_the_context():
    assert switches_topic("iets anders: mag mijn buurman een schutting bouwen?")
    assert switches_topic("Andere vraag. Hoe lang is een paspoort geldig?")
    assert not switches_topic("en als ik parttime werk?")
    assert not switches_topic("geldt dat ook voor mijn ex?")
    switched = Conversation.of(_chat(WORK, CITED, "iets anders: wanneer krijg ik AOW?"))
    assert switched.context() is None


@pytest.mark.unit
def test_a_question_that_stands_alone_and_names_another_law_is_read_alone():
    class Names:  # the index's law names, as retrieval.dutch.LawNames gives them
        def named(self, text):
            return {"BWBR0002221"} if "AOW" in text else {"BWBR0007671"} if "Arbeidstijdenwet" in text else set()

    standalone = "Op welke leeftijd krijg ik precies mijn AOW-uitkering van de overheid uitbetaald?"
    assert switches_topic(standalone, Conversation.of(_chat(WORK, CITED, standalone)).earlier, Names())
    # The same law as before: a follow-up, whatever its length.
    again = "Wat zegt de Arbeidstijdenwet over het maximum aantal uren per week voor werknemers?"
    assert not switches_topic(again, Conversation.of(_chat(WORK, CITED, again)).earlier, Names())


@pytest.mark.unit
def test_a_conversation_over_the_limits_is_one_error_naming_the_limit():
    with pytest.raises(ConversationError, match=f"read up to {MAX_MESSAGES}"):
        Conversation.of(_chat(*["vraag?"] * (MAX_MESSAGES + 1)))
    with pytest.raises(ConversationError, match=f"read up to {MAX_CONTEXT_CHARS}"):
        Conversation.of(_chat("x" * MAX_CONTEXT_CHARS, "y" * 10, "en nu?"))
    with pytest.raises(ConversationError, match="no user message"):
        Conversation.of([{"role": "assistant", "content": "hallo"}])


@pytest.mark.unit
def test_the_limit_counts_only_the_turns_that_are_read():
    """Three exchanges with long answers were refused although only the last two questions are read (review
    finding 4): the turns before them are not read, so they do not count."""
    answer = "Volgens artikel 7:629 BW " + "loon " * 420  # about 2,100 characters, as answers that quote articles
    conversation = Conversation.of(
        _chat(
            "Krijg ik loon als ik ziek ben?",
            answer,
            "Hoe lang duurt dat?",
            answer,
            "Moet ik me ziek melden?",
            answer,
            "en als ik 17 ben?",
        )  # fmt: skip
    )
    context = conversation.context()
    assert context is not None and context.questions == ("Hoe lang duurt dat?", "Moet ik me ziek melden?")
    with pytest.raises(ConversationError, match=f"read up to {MAX_CONTEXT_CHARS}"):  # what is read still counts
        Conversation.of(_chat("Hoe lang duurt dat?", "x" * MAX_CONTEXT_CHARS, "en nu?"))


@pytest.mark.unit
def test_a_follow_up_that_points_back_is_no_switch_whatever_it_opens_with():
    """ "Nog een vraag" and "verder" open follow-ups too: with a word pointing back, the context stays (review
    finding 17); with none, the subject changes."""
    assert not switches_topic("Nog een vraag: geldt dat ook voor mijn ex?")
    assert not switches_topic("Verder: mag hij dat zomaar doen?")
    assert not switches_topic("verder nog, geldt dat ook in het weekend?")
    assert switches_topic("Iets anders: hoeveel vakantiedagen heb ik per jaar?")
    assert switches_topic("Nog een vraag: hoeveel vakantiedagen heb ik per jaar?")


@pytest.mark.unit
def test_a_dataset_of_conversations_loads_its_last_user_message_as_the_question(tmp_path):
    from wetqa.corpus.dataset import DatasetError, load_dataset

    path = tmp_path / "conv.jsonl"
    path.write_text(json.dumps({"id": "c1", "messages": _chat(WORK, CITED, "en als ik 17 ben?"),
                                "articles": [{"bwb_id": "BWBR0007671", "article": "Artikel 5:7"}]}) + "\n",
                    encoding="utf-8")  # fmt: skip
    (item,) = load_dataset(path)
    assert item.question == "en als ik 17 ben?" and len(item.messages) == 3
    path.write_text(json.dumps({"id": "c2", "messages": [{"role": "assistant", "content": "x"}]}) + "\n", "utf-8")
    with pytest.raises(DatasetError, match="no user message"):
        load_dataset(path)
    path.write_text(json.dumps({"id": "c3"}) + "\n", "utf-8")
    with pytest.raises(DatasetError, match="a question or messages is required"):
        load_dataset(path)


# ------------------------------------------------------------------------------------ the real laws
@pytest.mark.integration
def test_a_follow_up_is_ranked_with_its_context(real_articles_index):
    from wetqa.retrieval.conversation import Conversation
    from wetqa.retrieval.spec import RetrievalSpec

    pipeline = RetrievalSpec(index=(str(real_articles_index),), reader="none").build()
    conversation = Conversation.of(_chat(WORK, CITED, "en als het een nachtdienst is?"))
    context = conversation.context(pipeline.features.law_names)
    (alone,) = pipeline.rank([conversation.question], 10)
    (followed,) = pipeline.rank([conversation.question], 10, contexts=[context])
    c = followed.candidates
    cited = [i for i, x in enumerate(c.articles) if c.values["ctx_cited"][i]]
    assert len(cited) == 1  # the cited article is a candidate, known as the one cited
    keys = [(h.chunk.law_id, h.chunk.article) for h in followed.hits]
    assert keys[0][0] == "BWBR0007671"  # read in its context, the follow-up is about the working hours act
    assert alone.context is None and followed.context is context


@pytest.mark.integration
def test_ask_with_context_and_chat_read_follow_ups(real_corpus, real_articles_index, tmp_path):
    def wetqa(*argv, stdin=None):
        return subprocess.run([sys.executable, "-m", "wetqa", *argv], capture_output=True, text=True, input=stdin)

    ask = wetqa("ask", "en als het een nachtdienst is?", "--context", WORK, "--index", str(real_articles_index),
                "--reader", "none", "--output", "json")  # fmt: skip
    assert ask.returncode == 0, ask.stderr
    answer = json.loads(ask.stdout)
    assert answer["context"]["standalone_question"].endswith(f"(eerder: {WORK})")
    assert answer["citations"][0]["law_id"] == "BWBR0007671"
    blank = wetqa("ask", "en dan?", "--context", " ", "--index", str(real_articles_index))
    assert blank.returncode == 2 and "--context" in blank.stderr
    lines = "\n".join([WORK, "en als het een nachtdienst is?", "/nieuw", "en als het een nachtdienst is?", ""])
    chat = wetqa("chat", "--index", str(real_articles_index), "--reader", "none", "--output", "json", stdin=lines)
    assert chat.returncode == 0, chat.stderr
    answers = [json.loads(line) for line in chat.stdout.splitlines()]
    assert len(answers) == 3
    assert answers[0]["context"] is None and answers[1]["context"]["turns"] == [0, 1]
    assert answers[2]["context"] is None  # /nieuw started afresh: the same words, read alone
    # A conversation grown past what is read does not end the chat (review finding 4): it starts afresh, says so
    # in one line, and answers the question alone.
    long = "Hoeveel uur mag ik werken als " + "ik heel lang doorwerk en " * 260 + "dat zo blijft?"
    lines = "\n".join([long, "en als het een nachtdienst is?", WORK, ""])
    chat = wetqa("chat", "--index", str(real_articles_index), "--reader", "none", "--output", "json", stdin=lines)
    assert chat.returncode == 0, chat.stderr
    answers = [json.loads(line) for line in chat.stdout.splitlines()]
    assert len(answers) == 3 and answers[1]["context"] is None and answers[2]["context"]["turns"] == [0, 1]
    assert chat.stderr.count("nieuw gesprek") == 1


@pytest.mark.integration
def test_the_fits_cached_candidates_follow_a_conversations_earlier_turns(real_articles_index, monkeypatch, tmp_path):
    """The candidates a fit caches are keyed by a conversation's earlier turns too (review finding 10): editing
    them is not fitted on the candidates of the old ones."""
    from wetqa.retrieval.fitting.ranking import FitQuestion, prepare

    monkeypatch.setenv("WETQA_CACHE", str(tmp_path / "cache"))
    cited = (
        "Volgens artikel 5:7 van de Arbeidstijdenwet mag dat hoogstens 12 uur. [1]\n\nBronnen:\n[1] Arbeidstijdenwet, "
        "Artikel 5:7, tekst van 1 januari 2024 (DOC17850, BWBR0007671_2024-01-01_art5:7_1)"
    )

    def conversation(answer):
        messages = (("user", "Hoeveel uur mag mijn baas mij per dag laten werken?"), ("assistant", answer),
                    ("user", "en als het een nachtdienst is?"))  # fmt: skip
        q = FitQuestion("c1", "conv", "en als het een nachtdienst is?", frozenset(), frozenset({"BWBR0007671"}),
                        messages)  # fmt: skip
        return {"conv": [q]}

    def cited_values(answer):
        prep = prepare(real_articles_index, conversation(answer), dense=False, progress=False, questions=False)
        ((_, c),) = prep.items
        return sorted(float(v) for v in c.values["ctx_cited"])

    assert cited_values(cited) != cited_values("Dat hangt af van uw contract.")


# ----------------------------------------------------------------------------------------- the API
@pytest.mark.integration
def test_a_three_turn_conversation_through_the_openai_client(articles_index):
    import openai

    from wetqa.generation import GeneratorConfig, Pipeline
    from wetqa.generation.backends.extractive import ExtractiveBackend
    from wetqa.retrieval import RetrievalSpec

    from .serving import LiveServer, make_app, served_pipeline

    # An articles pipeline: its retrieval reads the conversation, and its answers say so (context).
    served = served_pipeline("wetqa-conv", articles_index, GeneratorConfig("extractive"))
    served.pipeline = Pipeline(RetrievalSpec(index=(str(articles_index),), rescore="none", reader="none").build(),
                               ExtractiveBackend(), k=2)  # fmt: skip
    first = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"
    with LiveServer(make_app([served])) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
        messages = [{"role": "system", "content": "Antwoord kort."}, {"role": "user", "content": first}]
        one = client.chat.completions.create(model="wetqa-conv", messages=messages)
        assert one.model_extra["context"] is None  # a question alone
        messages += [{"role": "assistant", "content": one.choices[0].message.content},
                     {"role": "user", "content": "en als de ouder het gezag misbruikt?"}]  # fmt: skip
        two = client.chat.completions.create(model="wetqa-conv", messages=messages)
        context = two.model_extra["context"]
        assert context["turns"] == [1, 2]  # the system message (0) is not read
        assert context["standalone_question"] == f"en als de ouder het gezag misbruikt? (eerder: {first})"
        assert any("266" in c for c in context["cited"])  # the article the first answer cited, from its text
        messages += [{"role": "assistant", "content": two.choices[0].message.content},
                     {"role": "user", "content": "geldt dat ook voor een voogd?"}]  # fmt: skip
        three = client.chat.completions.create(model="wetqa-conv", messages=messages)
        assert three.model_extra["context"]["turns"] == [1, 2, 3, 4]  # the two questions before it, with the answers
        # Streamed: the same context in the last chunk.
        last = None
        for chunk in client.chat.completions.create(model="wetqa-conv", messages=messages, stream=True):
            if chunk.choices and chunk.choices[0].finish_reason:
                last = chunk
        assert last is not None and last.model_extra["context"] == three.model_extra["context"]
        # Over the limit: a 400 naming messages, nothing answered.
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="wetqa-conv", messages=[{"role": "user", "content": "vraag?"}] * (MAX_MESSAGES + 1)
            )
        assert refused.value.body["param"] == "messages" and str(MAX_MESSAGES) in refused.value.body["message"]


@pytest.mark.unit
def test_the_context_is_reported_only_where_retrieval_read_it(bm25s_index, articles_index):
    """A bm25s pipeline searched the last message alone but the answer said it had read the earlier turns
    (`context.standalone_question`; review finding 14): only a pipeline whose stages read a conversation says so."""
    from wetqa.generation import Pipeline
    from wetqa.generation.backends.extractive import ExtractiveBackend
    from wetqa.retrieval import RetrievalSpec, open_index

    messages = _chat(WORK, CITED, "en als het een nachtdienst is?")
    plain = Pipeline(open_index(bm25s_index), ExtractiveBackend(), k=2)
    request = plain.converse(messages)
    assert plain.answer_one(request).context is None
    assert WORK in request.asked  # the prompt still reads the earlier question (second review, finding 5)
    articles = Pipeline(RetrievalSpec(index=(str(articles_index),), rescore="none", reader="none").build(),
                        ExtractiveBackend(), k=2)  # fmt: skip
    read = articles.answer_one(articles.converse(messages)).context
    assert read is not None and read["turns"] == [0, 1]
