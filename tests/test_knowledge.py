"""Knowledge from the user's documents: passages, the index kept up to date, the search off the frame
loop, the retrievals launched from partials, and the providers that feed the oracle and the cascade."""
import asyncio
import logging
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fakes import FakeFrontEnd, FakeListener, FakeOpenAIServer, FakeTTS
from tandem.record import timeline as tl
from tandem.audio.frames import FRAME_SAMPLES
from tandem.knowledge import KnowledgeBase, KnowledgeError, KnowledgeIndex, Retriever
from tandem.knowledge.documents import split_passages
from tandem.knowledge.query import content_words, fts_query
from tandem.llm.client import ChatClient, LLMConfig
from tandem.providers import FirstOf, LLMProvider, OracleRequest, for_cascade, for_oracles
from tandem.providers.extractive import ExtractiveProvider, best_sentence
from tandem.providers.knowledge import KnowledgeProvider
from tandem.turn.session import Session, SessionConfig
from tandem.speak.tts import Voicer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "knowledge"

MANUAL = """# Acme Widget manual

## Charging
A full charge takes four hours. The light glows amber while it charges.

## Warranty
The widget carries a warranty of three years.
"""


def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "manual.md").write_text(MANUAL)
    (root / "policies.txt").write_text("Acme policies\n\nReturns\nYou may return it within forty five days.\n")
    (root / "faq.html").write_text("<html><head><title>Acme FAQ</title><script>var x = 'secret';</script></head>"
                                   "<body><h2>Who founded Acme?</h2><p>Acme was founded by Ada Brooks.</p></body></html>")
    return root


def titles(hits) -> list[str]:
    return [h.passage.title for h in hits]


# -- documents and passages --------------------------------------------------------------------
def test_passages_keep_their_document_and_section_headings():
    ps = split_passages("manual.md", MANUAL)
    assert [p.title for p in ps] == ["Acme Widget manual: Charging", "Acme Widget manual: Warranty"]
    assert ps[1].body == "The widget carries a warranty of three years."


def test_html_pages_lose_scripts_and_keep_headings_and_title():
    ps = split_passages("faq.html", "<title>FAQ</title><script>alert('no')</script><h2>Who?</h2><p>Ada <b>Brooks</b>.</p>")
    assert [(p.title, p.body) for p in ps] == [("FAQ: Who?", "Ada Brooks.")]


def test_plain_text_headings_and_long_paragraphs_are_split():
    long = " ".join(f"Sentence {i} has six words here." for i in range(40))
    ps = split_passages("p.txt", f"Title line\n\nSection one\n{long}\n")
    assert all(p.title == "Title line: Section one" for p in ps)
    assert len(ps) >= 3 and all(len(p.body.split()) <= 80 for p in ps)
    assert " ".join(p.body for p in ps) == long, "nothing is lost between passages"


def test_query_words_and_the_variants_speech_to_text_makes():
    assert content_words("What is the warranty on the kettle?") == ["warranty", "kettle"]
    q = fts_query("how many days do I have, 45 or so, blue fin")
    assert '"45"' in q and '"forty five"' in q and '"bluefin"' in q
    assert fts_query("what is the") == ""


# -- the index --------------------------------------------------------------------------------
def test_the_index_is_reused_when_no_document_changed_and_rebuilt_for_one_that_did(tmp_path):
    root = corpus(tmp_path)
    path = tmp_path / "index.sqlite"
    idx = KnowledgeIndex.open(root, path, progress=False)
    assert (idx.stats.indexed, idx.stats.reused, idx.stats.documents) == (3, 0, 3)
    idx.close()
    idx = KnowledgeIndex.open(root, path, progress=False)
    assert (idx.stats.indexed, idx.stats.reused) == (0, 3), "nothing changed: nothing re-read"
    idx.close()
    manual = root / "manual.md"
    os.utime(manual, ns=(time.time_ns(), time.time_ns() + 10**9))  # touched, same bytes
    idx = KnowledgeIndex.open(root, path, progress=False)
    assert (idx.stats.indexed, idx.stats.reused) == (0, 3), "a touched file with the same text is not re-indexed"
    idx.close()
    manual.write_text(MANUAL.replace("three years", "seven years"))
    os.utime(manual, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    idx = KnowledgeIndex.open(root, path, progress=False)
    assert (idx.stats.indexed, idx.stats.reused) == (1, 2)
    assert "seven years" in idx.search("how long is the warranty")[0].passage.body
    (root / "faq.html").unlink()
    idx.update(progress=False)
    assert idx.stats.removed == 1
    assert not any("Brooks" in h.passage.body for h in idx.search("who founded acme", k=5))
    idx.close()


def test_search_ranks_the_passage_that_holds_the_question_words(tmp_path):
    idx = KnowledgeIndex.open(corpus(tmp_path), tmp_path / "i.sqlite", progress=False)
    assert titles(idx.search("how long does it take to charge", k=1)) == ["Acme Widget manual: Charging"]
    assert idx.search("how many days do I have to return it", k=1)[0].passage.path == "policies.txt"
    assert idx.search("45 days", k=1)[0].passage.path == "policies.txt", "digits find spoken numbers"
    assert idx.search("who founded a cme")[0].passage.body == "Acme was founded by Ada Brooks."
    assert idx.search("zebra xylophone") == []
    assert "secret" not in " ".join(h.passage.body for h in idx.search("var x secret", k=5))


def test_a_missing_path_or_an_empty_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(KnowledgeError, match="no such file or folder"):
        KnowledgeIndex.open(tmp_path / "nowhere", tmp_path / "i.sqlite", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(KnowledgeError, match="holds no documents"):
        KnowledgeIndex.open(tmp_path / "empty", tmp_path / "i.sqlite", progress=False)
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "a.md").write_text("\n\n")
    with pytest.raises(KnowledgeError, match="gave no passages"):
        KnowledgeIndex.open(tmp_path / "blank", tmp_path / "j.sqlite", progress=False)


def test_binary_and_undecodable_files_are_skipped_with_a_warning_naming_them(tmp_path, caplog):
    root = corpus(tmp_path)
    (root / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    caplog.set_level(logging.WARNING)
    idx = KnowledgeIndex.open(root, tmp_path / "i.sqlite", progress=False)
    assert idx.stats.documents == 3 and any("image.md" in s and "binary" in s for s in idx.stats.skipped)
    assert "image.md" in caplog.text
    idx.close()
    only = tmp_path / "only"
    only.mkdir()
    (only / "x.txt").write_bytes(b"\x00\x01\x02")
    with pytest.raises(KnowledgeError, match="x.txt"):
        KnowledgeIndex.open(only, tmp_path / "k.sqlite", progress=False)


def test_a_single_file_is_a_corpus_too(tmp_path):
    idx = KnowledgeIndex.open(corpus(tmp_path) / "manual.md", tmp_path / "i.sqlite", progress=False)
    assert idx.stats.documents == 1 and idx.search("warranty")[0].passage.path == "manual.md"


def test_a_corrupt_index_file_is_rebuilt(tmp_path):
    path = tmp_path / "i.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    idx = KnowledgeIndex.open(corpus(tmp_path), path, progress=False)
    assert idx.stats.indexed == 3 and idx.search("warranty")


# -- retrieval while the user speaks ------------------------------------------------------------
async def test_retrieval_starts_on_partials_with_enough_words_off_the_event_loop(tmp_path):
    kb = KnowledgeBase.open(corpus(tmp_path), tmp_path / "i.sqlite", progress=False)
    threads: list[str] = []
    search = kb.index.search
    kb.index.search = lambda *a, **k: (threads.append(threading.current_thread().name), search(*a, **k))[1]
    events: list[dict] = []
    r = Retriever(kb)
    note = lambda kind, **d: events.append({"kind": kind, **d})  # noqa: E731
    r.observe("how long", False, note)
    assert r.stats["searches"] == 0, "one content word is not worth a search"
    r.observe("how long is the warranty", False, note)
    r.observe("how long is the warranty on", False, note)
    assert r.stats["searches"] == 1, "the same content words are not searched twice"
    hits = await r.hits("how long is the warranty on", note)
    assert "three years" in hits[0].passage.body and r.stats == {"searches": 1, "reused": 1}
    assert threads and all(t.startswith("knowledge") for t in threads), "every query runs on the index's thread"
    assert events[0]["kind"] == tl.RETRIEVAL and events[0]["trigger"] == "partial" and events[0]["passages"]
    r.observe("how long is the warranty", True, note)
    r.observe("how long is the warranty", True, note)  # each provider of a chain passes it on
    assert await r.hits("how long is the warranty", note) and r.stats == {"searches": 1, "reused": 2}, \
        "the turn's search is kept, not cleared by the second provider's call"
    r.observe("and the charge", False, note)  # a new turn: too few words alone, so the last turn's join them
    assert "charge" in r.query_for("and the charge") and "warranty" in r.query_for("and the charge")
    kb.close()


def test_a_close_sentence_is_a_direct_answer_and_a_loose_one_is_not():
    passages = [("Policies: Shipping", "Shipping is free on orders over eighty dollars. Express delivery costs twelve dollars.")]
    assert best_sentence("How much does express delivery cost?", passages)[0] == "Express delivery costs twelve dollars."
    assert best_sentence("When is shipping free?", passages)[0].startswith("Shipping is free")
    assert best_sentence("What is the capital of France?", passages) is None
    assert best_sentence("shipping", passages) is None, "one content word is too little to answer from"


async def test_the_chain_answers_outright_or_asks_the_llm_with_the_passage(tmp_path):
    kb = KnowledgeBase.open(corpus(tmp_path), tmp_path / "i.sqlite", progress=False)
    with FakeOpenAIServer() as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m"))
        chain = for_oracles(client, kb)
        assert isinstance(chain, FirstOf) and isinstance(chain.providers[0], ExtractiveProvider)
        q = "how long does a full charge take"
        said = "".join([d async for d in chain.answer(OracleRequest(turns=(), partial=q, question=q))])
        assert said == "A full charge takes four hours.", "answered from the document, no LLM"
        assert not srv.requests
        q = "tell me about acme widget"
        said = "".join([d async for d in chain.answer(OracleRequest(turns=(), partial=q, question=q))])
        assert said == "The answer is Paris." and len(srv.requests) == 1
        system = srv.requests[0]["body"]["messages"][0]["content"]
        assert "documents" in system and "Acme Widget" not in system, "passage bodies, not their headings"
        # the cascade gets the same passage in the same prompt, and no direct answer
        cascade = for_cascade(client, kb)
        assert isinstance(cascade, KnowledgeProvider) and isinstance(cascade.inner, LLMProvider)
        q = "how long does a full charge take"
        req = OracleRequest(turns=(("user", q),), question=q)
        said = "".join([d async for d in cascade.answer(req)])
        assert said == "The answer is Paris."
        assert "four hours" in srv.requests[-1]["body"]["messages"][0]["content"]
        await client.aclose()
    kb.close()


def frames(secs: float) -> np.ndarray:
    return np.zeros((int(secs / 0.08), FRAME_SAMPLES), np.float32)


QUESTION = [
    (0.5, {"kind": "vad_start", "audio_s": 0.4}),
    (0.9, {"kind": "partial", "text": "how long does", "audio_start_s": 0.2, "audio_s": 0.9}),
    (1.3, {"kind": "partial", "text": "how long does a full charge", "audio_start_s": 0.2, "audio_s": 1.3}),
    (2.0, {"kind": "vad_end", "audio_s": 1.6, "speech_s": 1.2}),
    (2.2, {"kind": "final", "text": "how long does a full charge take", "audio_start_s": 0.2, "audio_s": 1.7}),
]


async def test_a_tandem_session_feeds_the_documents_answer_before_the_final_transcript(tmp_path):
    kb = KnowledgeBase.open(corpus(tmp_path), tmp_path / "i.sqlite", progress=False)
    with FakeOpenAIServer() as srv:
        client = ChatClient(LLMConfig(url=srv.url, model="m"))
        fe = FakeFrontEnd()
        sess = Session(SessionConfig(mode="tandem", frame_vad=False), FakeListener(list(QUESTION), in_speech_until=1.7), client,
                       front_end=fe, knowledge=kb)
        await sess.run(frames(3.5))
        await client.aclose()
    ev = sess.timeline.events
    final_t = next(e["t"] for e in ev if e["kind"] == tl.FINAL)
    retrievals = [e for e in ev if e["kind"] == tl.RETRIEVAL]
    assert any(r["trigger"] == "partial" and r["t"] < final_t for r in retrievals), "searched while the user spoke"
    direct = [e for e in ev if e["kind"] == tl.EXTRACTIVE]
    assert direct and direct[0]["t"] < final_t, "the document's answer was an oracle while the user still spoke"
    fed = [fe.tokenizer.decode([t]) for t in fe.fed if t > 1]
    assert "four" in fed and "hours." in fed
    assert sess.timeline.meta["knowledge"]["passages"] == 1
    kb.close()


async def test_a_cascade_session_and_a_tandem_one_ask_the_llm_the_same_thing(tmp_path):
    """Both modes ask with one prompt, and with documents the same passages: the comparison is fair."""
    kb = KnowledgeBase.open(corpus(tmp_path), tmp_path / "i.sqlite", progress=False)
    script = [(0.9, {"kind": "partial", "text": "tell me about the acme widget", "audio_start_s": 0.2, "audio_s": 0.9}),
              (1.6, {"kind": "final", "text": "tell me about the acme widget", "audio_start_s": 0.2, "audio_s": 1.4})]
    bodies = {}
    for mode in ("tandem", "cascade"):
        with FakeOpenAIServer() as srv:
            client = ChatClient(LLMConfig(url=srv.url, model="m"))
            voicer = Voicer(FakeTTS()) if mode == "cascade" else None
            sess = Session(SessionConfig(mode=mode, frame_vad=False), FakeListener(list(script), in_speech_until=1.4), client,
                           voicer=voicer, front_end=FakeFrontEnd() if mode == "tandem" else None, knowledge=kb)
            await sess.run(frames(3.0))
            if voicer:
                voicer.close()
            await client.aclose()
            bodies[mode] = srv.requests[-1]["body"]["messages"]
    assert bodies["tandem"] == bodies["cascade"]
    assert "warranty" in bodies["cascade"][0]["content"] or "charge" in bodies["cascade"][0]["content"]
    kb.close()


def test_the_example_knowledge_folder_indexes(tmp_path):
    idx = KnowledgeIndex.open(EXAMPLES, tmp_path / "i.sqlite", progress=False)
    assert idx.stats.documents == 4 and idx.stats.passages >= 20 and not idx.stats.skipped


def test_the_default_index_lives_in_tandems_one_cache_directory(tmp_path, monkeypatch):
    from tandem.knowledge.index import default_index_path

    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    path = default_index_path(tmp_path / "docs")
    assert path.parent == tmp_path / "cache" / "knowledge" and path.name.startswith("docs-")
    monkeypatch.delenv("TANDEM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_index_path(tmp_path / "docs").parent == tmp_path / "xdg" / "tandem" / "knowledge"
