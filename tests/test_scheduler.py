import asyncio
import time

import pytest

from fakes import FakeLLMBehaviour, FakeOpenAIServer, until
from tandem.record import timeline as tl
from tandem.turn.conversation import Conversation
from tandem.llm.client import ChatClient, LLMConfig
from tandem.providers import LLMProvider
from tandem.turn.scheduler import OracleScheduler, SchedulerConfig
from tandem.think.oracle import WordBuffer


def make(srv, prefill: bool = False, **cfg):
    """`prefill`: the LLM goes on from a reply begun for it (LLMConfig.prefill)."""
    cfg.setdefault("restate", False)  # the restated opening has its own tests below
    cfg.setdefault("min_turn_words", 2)  # KAME's rule; the shortest turn worth a start has its own test
    t0 = time.perf_counter()
    timeline = tl.Timeline(lambda: time.perf_counter() - t0)
    emitted: list[tuple[str, str]] = []
    config = SchedulerConfig(**cfg)
    provider = LLMProvider(ChatClient(LLMConfig(url=srv.url, model="m", prefill=prefill)), form=config.prompt_form)
    sched = OracleScheduler(provider, Conversation(), timeline, lambda k, t: emitted.append((k, t)), config)
    return sched, timeline, emitted


async def test_starts_on_two_new_words_not_on_one():
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("what")
        sched.check()
        assert sched.stats["starts"] == 0
        sched.on_partial("what is")
        sched.check()
        assert sched.stats["starts"] == 1
        sched.on_partial("what is the")
        sched.check()
        assert sched.stats["starts"] == 1, "one more word is not enough"
        await until(lambda: "".join(t for k, t in emitted if k == "append").endswith("."))
        assert emitted[0] == ("reset", "")
        assert "".join(t for k, t in emitted if k == "append") == "The answer is Paris."
        prompt = srv.requests[0]["body"]["messages"][-1]["content"]
        assert prompt == "what is", "the live partial is the last user message"
        await sched.aclose()


async def test_one_word_that_completes_a_question_starts_a_stream():
    """KAME waits for two new words; the word that completes a question is often one, and Whisper's
    closing punctuation says it is complete. The final with the same words then keeps that stream."""
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("what is the capital of")
        assert sched.stats["starts"] == 1
        sched.on_partial("what is the capital of Aust...")
        assert sched.stats["starts"] == 1, "an ellipsis: still being said"
        sched.on_partial("what is the capital of Australia?")
        assert sched.stats["starts"] == 2
        sched.on_partial("what is the capital of Australia?")
        assert sched.stats["starts"] == 2, "the same words again start nothing"
        sched.on_final("What is the capital of Australia?")
        assert sched.stats["starts"] == 2 and sched.stats["kept"] == 1
        await sched.aclose()


async def test_a_follow_up_that_now_stands_for_a_whole_question_starts_a_stream():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Ottawa", "."])) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_final("What is the capital of Canada?")
        await until(lambda: not sched.in_flight)
        sched.conv.on_assistant("The capital of Canada is Ottawa.")
        sched.on_partial("and the capital of")
        starts = sched.stats["starts"]
        sched.on_partial("and the capital of Australia.")
        assert sched.stats["starts"] == starts + 1, "one new word, but now a whole question"
        assert timeline.of_kind(tl.LLM_START)[-1]["prompt"] == "And what is the capital of Australia?"
        await sched.aclose()


async def test_without_the_complete_question_rule_one_word_waits():
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv, start_on_complete=False)
        sched.on_partial("what is the capital of")
        sched.on_partial("what is the capital of Australia?")
        assert sched.stats["starts"] == 1
        await sched.aclose()


async def test_final_starts_a_stream_even_without_new_words():
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv, keep_on_same_final=False)
        sched.on_partial("what is paris")
        sched.on_final("what is paris")
        assert sched.stats["starts"] == 2
        await sched.aclose()


async def test_a_final_as_heard_keeps_the_stream_started_from_its_partial():
    slow = FakeLLMBehaviour(first_token_delay_s=0.3)
    with FakeOpenAIServer(slow) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("what is the capital of france")
        assert sched.stats["starts"] == 1, "a partial starts a stream at once, not at the next tick"
        sched.on_final("What is the capital of France?")
        assert sched.stats["starts"] == 1 and sched.stats["kept"] == 1
        assert timeline.of_kind(tl.LLM_KEEP)[0]["stream"] == 1
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert not timeline.of_kind(tl.LLM_CANCEL)
        assert "".join(t for k, t in emitted if k == "append") == "The answer is Paris."
        await sched.aclose()


async def test_a_final_that_differs_from_the_partial_starts_anew():
    with FakeOpenAIServer(FakeLLMBehaviour(first_token_delay_s=0.3)) as srv:
        sched, timeline, _ = make(srv)
        sched.on_partial("what is the capital of france")
        sched.on_final("what is the capital of finland")
        assert sched.stats["starts"] == 2 and sched.stats["kept"] == 0
        await sched.aclose()


async def test_a_final_restarts_when_the_partial_stream_failed_or_gave_nothing():
    with FakeOpenAIServer(FakeLLMBehaviour(status=500)) as srv:
        sched, timeline, _ = make(srv)
        sched.on_partial("what is the capital of france")
        await until(lambda: bool(timeline.of_kind(tl.LLM_ERROR)))
        sched.on_final("what is the capital of france")
        assert sched.stats["starts"] == 2, "a failed stream is not kept"
        await sched.aclose()
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["user", ":", " hi"])) as srv:
        sched, timeline, _ = make(srv)
        sched.on_partial("what is the capital of france")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        sched.on_final("what is the capital of france")
        assert sched.stats["starts"] == 2, "a stream whose reply never got past the guard is not kept"
        await sched.aclose()


async def test_a_reply_about_the_user_is_an_echo_and_never_spoken():
    echo = FakeLLMBehaviour(tokens=["The", " user", " asked", " what", " is", " the", " name"])
    with FakeOpenAIServer(echo) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_final("what is the name of it")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert emitted == [] and not timeline.of_kind(tl.LLM_ADOPT)
        await sched.aclose()


async def test_the_previous_reply_said_again_for_a_new_question_never_replaces_the_oracle():
    """SmolLM2 answers the start of a new question with its last reply (seen in a live session: "How
    many legs" -> "The largest planet in the solar system is Jupiter."): that is no oracle."""
    again = FakeLLMBehaviour(tokens=["The", " largest", " planet", " in", " the", " solar", " system", " is",
                                     " Jupiter", ".", " It", " is", " big", "."])
    with FakeOpenAIServer(again) as srv:
        sched, timeline, emitted = make(srv)
        sched.conv.on_final("What is the largest planet in the solar system?")
        sched.conv.on_assistant("The largest planet in the solar system is Jupiter.")
        sched.on_partial("How many legs")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert emitted == [] and not timeline.of_kind(tl.LLM_ADOPT)
        assert timeline.of_kind(tl.LLM_DONE)[0]["cut"] == "an earlier reply again"
        await sched.aclose()


async def test_restart_cancels_the_superseded_stream_and_only_the_new_one_speaks():
    slow = FakeLLMBehaviour(tokens=[f" a{i}" for i in range(50)], token_delay_s=0.02)
    with FakeOpenAIServer(slow) as srv:
        # both replies say the same: kept quietly by default (tests below); here each one resets
        sched, timeline, emitted = make(srv, keep_agreeing_oracle=False)
        sched.on_partial("one two")
        sched.check()
        await asyncio.sleep(0.15)
        sched.on_partial("one two three four")
        sched.check()
        await until(lambda: sum(k == "reset" for k, _ in emitted) == 2)
        cancels = timeline.of_kind(tl.LLM_CANCEL)
        assert [c["stream"] for c in cancels] == [1]
        resets = [i for i, (k, _) in enumerate(emitted) if k == "reset"]
        assert len(resets) == 2
        await sched.aclose()
        await until(lambda: srv.disconnects == 2)
        assert srv.disconnects == 2, "cancelled requests must be closed at the server"


async def test_rate_limit_caps_starts_per_window():
    with FakeOpenAIServer(FakeLLMBehaviour(first_token_delay_s=1.0)) as srv:
        sched, _, _ = make(srv, max_starts=3, window_s=2.0)
        words = []
        for i in range(6):
            words += ["w", "x"]
            sched.on_partial(" ".join(words))
        assert sched.stats["starts"] == 3
        assert sched.stats["rate_limited"] == 3
        sched.on_partial(" ".join(words) + " w?")
        assert sched.stats["starts"] == 4, "a whole question is not capped"
        sched.on_final(" ".join(words) + " w x.")
        assert sched.stats["starts"] == 5, "nor is its final"
        await sched.aclose()


async def test_concurrent_streams_adopt_the_first_to_emit_and_cancel_older():
    with FakeOpenAIServer(FakeLLMBehaviour(first_token_delay_s=0.3)) as srv:
        sched, timeline, emitted = make(srv, max_concurrent=3)
        sched.on_partial("a b")
        sched.check()
        sched.on_partial("a b c d")
        sched.check()
        assert sched.stats["starts"] == 2 and sched.stats["cancels"] == 0
        await until(lambda: any(e["stream"] == 2 for e in timeline.of_kind(tl.LLM_ADOPT)))
        adopted = [e["stream"] for e in timeline.of_kind(tl.LLM_ADOPT)]
        assert adopted[-1] == 2
        # stream 1 may be adopted first if it emits first; it must then be cancelled by stream 2's adoption
        assert all(k != "append" or t for k, t in emitted)
        await sched.aclose()


async def test_errors_are_recorded_and_do_not_raise():
    with FakeOpenAIServer(FakeLLMBehaviour(status=500)) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_final("hello there")
        await until(lambda: bool(timeline.of_kind(tl.LLM_ERROR)))
        assert timeline.of_kind(tl.LLM_ERROR)
        assert emitted == []
        await sched.aclose()


async def test_a_revised_partial_starts_a_stream_without_new_words():
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv)
        sched.on_partial("what is the capital of austria")
        sched.check()
        assert sched.stats["starts"] == 1
        sched.on_partial("What is the capital of Austria?")
        sched.check()
        assert sched.stats["starts"] == 1, "punctuation and case are not a revision"
        sched.on_partial("what is the capital of australia")
        sched.check()
        assert sched.stats["starts"] == 2, "a revised word is"
        await sched.aclose()


async def test_kame_word_count_rule_alone_when_revisions_are_off():
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv, restart_on_revision=False)
        sched.on_partial("what is the capital of austria")
        sched.check()
        sched.on_partial("what is the capital of australia")
        sched.check()
        assert sched.stats["starts"] == 1
        await sched.aclose()


async def test_an_echoed_dialogue_line_ends_the_oracle_and_closes_the_request():
    echo = FakeLLMBehaviour(tokens=[" The", " user", ":", " who", " wrote", " it"] + [" x"] * 40, token_delay_s=0.01)
    with FakeOpenAIServer(echo) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_final("who wrote it")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert "".join(t for k, t in emitted if k == "append").strip() == "The"
        assert emitted[-1] == ("end", "")
        assert timeline.of_kind(tl.LLM_DONE)[0]["cut"] == "role marker"
        await until(lambda: srv.disconnects == 1)
        assert srv.tokens_sent < 46, "the server stops generating"
        await sched.aclose()


async def test_a_reply_that_is_only_a_dialogue_line_never_replaces_the_oracle():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["user", ":", " what", " is"])) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_final("what is it")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert emitted == [], "no reset: the front-end keeps the oracle it had"
        assert not timeline.of_kind(tl.LLM_ADOPT)
        await sched.aclose()


async def test_a_short_follow_up_turn_starts_on_its_own_two_words():
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv)
        sched.on_partial("what is the capital of france")
        sched.check()
        sched.on_final("what is the capital of france")
        assert sched.stats["starts"] == 1, "the final kept the partial's stream"
        await until(lambda: not sched.in_flight)
        sched.conv.on_assistant("Paris.")
        sched.on_partial("and germany")  # a new turn: its words count from zero, not from the last turn's six
        assert sched.stats["starts"] == 2
        await sched.aclose()


async def test_a_follow_up_without_a_reply_between_keeps_counting_the_same_turn():
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv)
        sched.on_final("what is the capital")  # the VAD split the question at a pause; nobody answered yet
        assert sched.stats["starts"] == 1
        sched.on_partial("of")
        sched.check()
        assert sched.stats["starts"] == 1, "one new word in the same turn is not enough"
        sched.on_partial("of france")
        sched.check()
        assert sched.stats["starts"] == 2
        await sched.aclose()


async def test_a_partial_that_drops_its_last_word_is_not_a_revision():
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv)
        sched.on_partial("what is the capital of austria")
        sched.check()
        assert sched.stats["starts"] == 1
        sched.on_partial("what is the capital of")  # Whisper took the last word back
        sched.check()
        assert sched.stats["starts"] == 1
        assert not timeline.of_kind(tl.LLM_CANCEL), "the stream answering the longer partial goes on"
        sched.on_partial("what is the capital of australia")
        sched.check()
        assert sched.stats["starts"] == 2, "a word heard before that changes is still a revision"
        await sched.aclose()


async def test_the_assistant_speaking_over_a_partial_does_not_count_its_words_again():
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv)
        sched.on_partial("what is the capital")
        sched.check()
        assert sched.stats["starts"] == 1
        sched.conv.on_assistant("The capital")  # the front-end already speaks the oracle of that partial
        sched.check()
        assert sched.stats["starts"] == 1, "no new word was heard"
        sched.on_partial("what is the capital of france")
        sched.check()
        assert sched.stats["starts"] == 2
        await sched.aclose()


async def test_a_stream_opens_with_the_restated_opening_before_the_llm_replies():
    slow = FakeLLMBehaviour(tokens=["Bangkok", " is", " the", " capital", " of", " Thailand", "."],
                            first_token_delay_s=0.3)
    with FakeOpenAIServer(slow) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.on_final("What is the capital of Thailand?")
        assert emitted == [("reset", ""), ("settled", "1"), ("append", "The capital of Thailand is ")], \
            "at once, before any token; a stream on the final settles the oracle"
        words = WordBuffer()
        assert words.push(emitted[2][1]) == "The capital of Thailand is", "its last word is fed at once too"
        assert timeline.of_kind(tl.RESTATE)[0]["text"] == "The capital of Thailand is"
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert "".join(t for k, t in emitted if k == "append") == "The capital of Thailand is Bangkok."
        assert [k for k, _ in emitted].count("reset") == 1, "the reply continued the opening"
        await sched.aclose()


async def test_once_the_llm_is_seen_to_answer_soon_a_long_opening_is_said_short():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["William", " Shakespeare", "."])) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.on_final("Who wrote the play Romeo and Juliet?")
        assert timeline.of_kind(tl.RESTATE)[-1]["text"] == "The play Romeo and Juliet was written by", \
            "how soon the LLM answers is not known yet"
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        sched.conv.on_assistant("The play Romeo and Juliet was written by William Shakespeare.")
        sched.on_final("Who painted the Mona Lisa?")
        assert timeline.of_kind(tl.RESTATE)[-1]["text"] == "It was painted by"
        await sched.aclose()


async def test_a_sessions_first_turn_knows_the_llms_pace_from_the_other_sessions():
    """A server's sessions share their streams' times to first token (SharedLLM.ttfts): a new session's
    first turn says its opening short when the LLM has been answering soon for the others."""
    from collections import deque

    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["William", " Shakespeare", "."])) as srv:
        first, timeline1, _ = make(srv, restate=True)
        second, timeline2, _ = make(srv, restate=True)
        shared: deque[float] = deque(maxlen=8)
        first.ttfts = second.ttfts = shared
        first.on_final("Who painted the Mona Lisa?")
        await until(lambda: bool(timeline1.of_kind(tl.LLM_DONE)))
        assert len(shared) == 1
        second.on_final("Who wrote the play Romeo and Juliet?")
        assert timeline2.of_kind(tl.RESTATE)[-1]["text"] == "It was written by"
        await first.aclose()
        await second.aclose()


async def test_the_scheduler_says_openings_short_from_its_configured_length():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Bangkok", "."])) as srv:
        sched, timeline, emitted = make(srv, restate=True, short_opening_words=2)
        sched.on_final("What is the capital of Thailand?")
        assert timeline.of_kind(tl.RESTATE)[-1]["text"] == "The capital of Thailand is", "the LLM's pace unknown yet"
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        sched.conv.on_assistant("The capital of Thailand is Bangkok.")
        sched.on_final("What is the capital of Peru?")
        assert timeline.of_kind(tl.RESTATE)[-1]["text"] == "It is"
        await sched.aclose()


async def test_a_reply_that_cannot_continue_the_opening_replaces_it():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["The", " capital", " of", " Thailand", "."])) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.on_final("What is the capital of Thailand?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        last_reset = max(i for i, (k, _) in enumerate(emitted) if k == "reset")
        assert last_reset > 0
        assert "".join(t for k, t in emitted[last_reset:] if k == "append") == "The capital of Thailand."
        await sched.aclose()


async def test_a_reply_that_replaces_the_opening_resets_the_oracle_once_and_then_goes_on():
    """Seen live: "It is" restated, the LLM answered "The largest animal on earth is the elephant. They
    can grow...": every chunk after the first sentence reset the oracle again (16 resets), so the
    front-end never read past a token and said "It is sorry."."""
    reply = ["The", " largest", " animal", " is", " the", " whale", ".", " It", " is", " very", " big", "."]
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=reply)) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.on_final("What is the largest animal on earth?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        resets = [i for i, (k, _) in enumerate(emitted) if k == "reset"]
        assert len(resets) == 2, "one on adoption (the opening), one when the reply replaces it"
        assert "".join(t for k, t in emitted[resets[-1]:] if k == "append") == "".join(reply)
        await sched.aclose()


async def test_an_opening_whose_llm_gives_nothing_ends_with_a_fallback_and_a_final_asks_again():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["user", ":", " hi"])) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.on_partial("What is the capital of Thailand")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        said = "".join(t for k, t in emitted if k == "append")
        assert said.startswith("The capital of Thailand is") and said.endswith("sorry.")
        sched.on_final("What is the capital of Thailand?")
        assert sched.stats["starts"] == 2, "a stream that only said its opening is not kept"
        await sched.aclose()


async def test_a_backchannel_while_the_assistant_talks_starts_nothing():
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv)
        sched.on_final("what is the capital of france")
        assert sched.stats["starts"] == 1
        await until(lambda: not sched.in_flight)
        sched.conv.on_assistant("The capital of France is")
        sched.talking = lambda: True
        sched.on_partial("Mm-hmm")
        sched.on_final("Mm-hmm.")
        sched.check()
        assert sched.stats["starts"] == 1 and sched.stats["backchannels"] == 1
        sched.talking = lambda: False
        sched.check()
        assert sched.stats["starts"] == 1, "its words do not count towards a later start"
        sched.on_final("Yes.")  # the same word when the assistant is quiet is an answer: it is heard
        assert sched.stats["starts"] == 2
        await sched.aclose()


async def question_and_follow_up(**cfg) -> tuple[list[dict], list[dict]]:
    """The messages the LLM was asked with for a question and, once answered, its follow-up."""
    with FakeOpenAIServer() as srv:
        sched, timeline, _ = make(srv, **cfg)
        sched.on_final("what is the capital of canada")
        await until(lambda: not sched.in_flight)
        sched.conv.on_assistant("Ottawa.")
        sched.on_final("and of australia")
        await until(lambda: len(srv.requests) == 2)
        await sched.aclose()
        first, second = (r["body"]["messages"] for r in srv.requests)
    return first, second


async def test_the_auto_form_asks_a_follow_up_in_chat_form_and_a_first_question_in_lines():
    first, second = await question_and_follow_up(prompt_form="auto")
    assert [m["role"] for m in first] == ["system", "user"] and first[1]["content"].startswith("user: ")
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    # the fragment is asked as the question it stands for, after the history (tandem/think/followup.py)
    assert second[-1]["content"] == "And what is the capital of australia?"
    assert second[1]["content"] == "what is the capital of canada" and second[2]["content"] == "Ottawa."


async def test_a_partial_of_fewer_words_than_the_minimum_starts_nothing_but_a_final_does():
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv, min_turn_words=3)
        sched.on_partial("how many")
        assert sched.stats["starts"] == 0, "two words are too few to ask about"
        sched.on_partial("how many points")
        assert sched.stats["starts"] == 1
        await sched.aclose()
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv, min_turn_words=3)
        sched.on_partial("thanks")
        sched.on_final("thanks bye")
        assert sched.stats["starts"] == 1, "a final of any length is answered"
        await sched.aclose()
    assert SchedulerConfig().min_turn_words == 3


async def test_by_default_a_follow_ups_prompt_begins_as_the_first_questions_did():
    """Chat form in every turn: a server that keeps the last prompt's state evaluates only the new turn."""
    first, second = await question_and_follow_up()
    assert second[: len(first)] == first
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]


async def test_a_stream_started_once_the_reply_is_under_way_is_asked_without_its_first_words():
    """The final arrives after the front-end began answering the partial: the LLM is asked the user's
    turn as the cascade would ask it, not shown the reply's first words as a finished message."""
    with FakeOpenAIServer(FakeLLMBehaviour(first_token_delay_s=0.2)) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("what is the tallest mountain in the")
        sched.conv.on_assistant("The tallest")
        sched.on_final("What is the tallest mountain in the world?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert sched.stats["starts"] == 2
        second = srv.requests[-1]["body"]["messages"]  # the first was cancelled, perhaps before it was sent
        assert [m["role"] for m in second] == ["system", "user"]
        assert second[-1]["content"] == "What is the tallest mountain in the world?"
        assert sched.conv.turns[-1] == ("assistant", "The tallest"), "the dialogue itself keeps what was said"
        await sched.aclose()


async def test_a_stream_started_once_the_reply_is_under_way_goes_on_from_its_opening():
    """The final's stream re-sends the opening the front-end is already saying, then splices its answer
    onto it: the oracle stream sees one answer continued, not a second reply that restarts."""
    reply = FakeLLMBehaviour(tokens=["Bangkok", " is", " the", " capital", " of", " Thailand", "."],
                             first_token_delay_s=0.3)
    with FakeOpenAIServer(reply) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.on_partial("What is the capital of Thailand")
        sched.conv.on_assistant("The capital")
        sched.on_final("What is the capital of Thailand, please?")
        assert sched.stats["starts"] == 2
        restated = timeline.of_kind(tl.RESTATE)
        assert [r["text"] for r in restated] == ["The capital of Thailand is"] * 2
        assert restated[1].get("reused") is True
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        last_reset = max(i for i, (k, _) in enumerate(emitted) if k == "reset")
        assert "".join(t for k, t in emitted[last_reset:] if k == "append") == "The capital of Thailand is Bangkok."
        await sched.aclose()


async def test_an_opening_its_reply_replaced_is_not_brought_back_by_a_later_stream():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Portugal", " is", " a", " country", " in", " Europe", "."])) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.on_partial("what is the capital of spain")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        sched.conv.on_assistant("Portugal is")
        sched.on_final("What is the capital of Spain, then?")
        assert sched.stats["starts"] == 2
        assert len(timeline.of_kind(tl.RESTATE)) == 1, "the front-end is saying the reply, not the opening"
        await sched.aclose()


async def test_the_last_turns_opening_is_never_sent_for_a_follow_up():
    """A follow-up fragment is restated as the question it stands for ("And Germany?": "The capital of
    Germany is"), from its partial on; the last turn's "The capital of France is" is never sent again."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Berlin", "."])) as srv:
        # the subject said in full, as with a slower LLM (with a quick one both openings are "It is")
        sched, timeline, emitted = make(srv, restate=True, min_turn_words=3, short_opening_words=5)
        sched.on_final("What is the capital of France?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        sched.conv.on_assistant("The capital of France is Paris.")
        sched.on_partial("and Germany?")
        assert sched.stats["starts"] == 2, "two words, but they stand for a whole question"
        sched.conv.on_assistant("The capital")
        sched.on_final("And Germany?")
        assert sched.stats["kept"] == 1, "the final says what the partial said: its stream goes on"
        assert [r["text"] for r in timeline.of_kind(tl.RESTATE)] == ["The capital of France is", "The capital of Germany is"]
        await sched.aclose()


async def test_a_short_follow_up_that_stands_for_nothing_waits_for_its_final():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Yes", "."])) as srv:
        sched, timeline, emitted = make(srv, restate=True, min_turn_words=3)
        sched.on_final("What is the capital of France?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        sched.conv.on_assistant("The capital of France is Paris.")
        sched.on_partial("really sure")
        assert sched.stats["starts"] == 1
        await sched.aclose()


async def test_an_opening_the_final_no_longer_fits_is_not_sent_again():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Canberra", "."], first_token_delay_s=0.2)) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.on_partial("What is the capital of Austria")
        sched.conv.on_assistant("The capital")
        sched.on_final("What is the capital of Australia?")
        assert sched.stats["starts"] == 2
        restated = timeline.of_kind(tl.RESTATE)
        assert [r["text"] for r in restated] == ["The capital of Austria is", "The capital of Australia is"], \
            "the old opening is not sent again; the new one goes on from the words said"
        assert restated[1]["said"] == "The capital"
        await sched.aclose()


async def test_a_lead_in_alone_starts_nothing():
    """"Sorry to cut" asks nothing yet: its words do not count towards a partial's start."""
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv, min_turn_words=3)
        sched.on_partial("Sorry to cut")
        sched.on_partial("Sorry to cut in. How many")
        assert sched.stats["starts"] == 0
        sched.on_partial("Sorry to cut in. How many hours are")
        assert sched.stats["starts"] == 1
        assert timeline.of_kind(tl.LLM_START)[-1]["prompt"] == "How many hours are"
        await sched.aclose()


async def test_while_others_fill_the_llm_a_growing_partial_waits_but_a_whole_question_starts():
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv)
        others = [1]
        sched.llm_load = lambda: others[0] + len(sched._live)
        sched.on_partial("what is the capital")
        assert sched.stats["starts"] == 0 and sched.stats["deferred"] == 1, "another session's request holds the slot"
        sched.on_partial("what is the capital of Australia?")
        assert sched.stats["starts"] == 1, "a whole question starts anyway"
        sched.on_partial("what is the capital of Australia? And of Canada")
        assert sched.stats["starts"] == 1
        others[0] = 0
        sched.check()
        assert sched.stats["starts"] == 2, "the words waited, and start once the LLM is free"
        await sched.aclose()


async def test_a_partial_the_user_went_on_past_completes_no_question():
    """Whisper ends a partial cut mid-question with a question mark ("What is the capital?"); the Listener
    says the voice went on past it (`said_more`), and under a busy LLM it waits as a growing partial does,
    nor does a pause the user went on past settle the turn."""
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv)
        others = [1]
        sched.llm_load = lambda: others[0] + len(sched._live)
        sched.on_partial("what is the capital?", said_more=True)
        assert sched.stats["starts"] == 0 and sched.stats["deferred"] == 1, "cut where the audio ended"
        sched.on_partial("what is the capital of France?", paused=True, said_more=True)
        assert sched.stats["starts"] == 0 and not sched._final_pending, "the user went on after the pause"
        sched.on_partial("what is the capital of France?")
        assert sched.stats["starts"] == 1, "the whole question, nothing said past it"
        await sched.aclose()
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv, cut_ends_no_question=False)
        sched.llm_load = lambda: 1 + len(sched._live)
        sched.on_partial("what is the capital?", said_more=True)
        assert sched.stats["starts"] == 1, "the rule off: the question mark counts"
        await sched.aclose()


async def test_words_whisper_marks_as_cut_off_do_not_count_towards_a_start():
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv, min_turn_words=3)
        sched.on_partial("St- St- St... St")
        assert sched.stats["starts"] == 0, "a stammered 'Stop' is one word"
        sched.on_partial("Thanks... What is the f-")
        assert sched.stats["starts"] == 1, "'What is the': three whole words"
        await sched.aclose()


async def test_the_oracle_is_settled_once_it_answers_the_final_transcript():
    """The front-end reads its reply ahead of itself only from a settled oracle (frontends/compact/decoding.py,
    `voice_ahead`): a stream started on a partial may be replaced; the final keeps it, or starts one that is."""
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv)
        settled = lambda: [t for k, t in emitted if k == "settled"]  # noqa: E731
        sched.on_partial("what is the capital of france")
        sched.check()
        await until(lambda: any(k == "reset" for k, _ in emitted))
        assert not sched.settled and settled() == [], "a stream on a partial"
        sched.on_final("what is the capital of france")
        assert sched.settled and settled() == ["1"], "the final kept it"
        sched.on_partial("and of spain")
        sched.check()
        await until(lambda: [k for k, _ in emitted].count("reset") == 2)
        assert not sched.settled and settled() == ["1", ""], "a new turn's stream on a partial unsettles it"
        sched.on_final("and of germany")
        await until(lambda: len(settled()) == 3)  # (the same reply again: kept without a reset)
        assert sched.settled and settled() == ["1", "", "1"], "a final that differs: its own stream settles it"
        await sched.aclose()


async def test_a_whole_sentence_heard_in_a_pause_settles_the_oracle_before_the_final():
    """The Listener's partial decoded as the user paused holds all they said; when it reads as a whole
    sentence its stream answers the turn (the final will be the same words), so the oracle is settled then,
    not at the endpoint: the front-end takes such a turn SETTLED_TURN_WAIT_FRAMES after the voice stops."""
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv)
        settled = lambda: [t for k, t in emitted if k == "settled"]  # noqa: E731
        sched.on_partial("how many legs does a spider have?")
        await until(lambda: any(k == "reset" for k, _ in emitted))
        assert not sched.settled, "a partial while the user speaks"
        sched.on_partial("how many legs does a spider have?", paused=True)
        assert sched.settled and settled() == ["1"], "the pause's partial, the same words: the stream is kept"
        assert timeline.of_kind(tl.LLM_KEEP)[-1]["reason"] == "paused partial as heard when it started"
        sched.on_final("how many legs does a spider have?")
        assert sched.settled and sched.stats["starts"] == 1, "the final changes nothing"
        await sched.aclose()


@pytest.mark.parametrize("text", ["what is the capital of", "what is the capital of?", "what is the capital of Aust..."])
async def test_a_pause_on_an_unfinished_sentence_settles_nothing(text):
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial(text, paused=True)
        await until(lambda: any(k == "reset" for k, _ in emitted))
        assert not sched.settled
        await sched.aclose()


async def test_the_user_going_on_after_the_pause_unsettles_the_oracle():
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("what is the capital of france?", paused=True)
        assert sched.stats["starts"] == 1
        await until(lambda: sched.settled)
        sched.on_partial("what is the capital of france? and how many people live there")
        await until(lambda: not sched.settled)
        assert sched.stats["starts"] == 2 and timeline.of_kind(tl.LLM_START)[-1]["prompt"].endswith("live there")
        await sched.aclose()


async def test_without_settle_on_pause_the_final_settles():
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv, settle_on_pause=False)
        sched.on_partial("how many legs does a spider have?", paused=True)
        await until(lambda: any(k == "reset" for k, _ in emitted))
        assert not sched.settled
        sched.on_final("how many legs does a spider have?")
        assert sched.settled
        await sched.aclose()


async def test_a_newer_stream_that_agrees_keeps_the_oracle_and_adds_only_what_is_new():
    """The final's stream says what the partial's stream was saying, and more: no reset (the front-end
    would lose the words ahead of it mid-word), only what it adds is appended."""
    words = ["It", " was", " written", " by", " William", " Shakes", "peare", " in", " 1597."]
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=words[:6], token_delay_s=0.05)) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("who wrote the play")
        await until(lambda: "".join(t for k, t in emitted if k == "append").endswith("William"))
        srv.behaviour.tokens, srv.behaviour.token_delay_s = words, 0.0
        n = len(emitted)
        sched.on_final("Who wrote the play Romeo and Juliet?")  # supersedes the partial's stream
        await until(lambda: not sched.in_flight)
        later = emitted[n:]
        assert ("reset", "") not in later, later
        assert "".join(t for k, t in emitted if k == "append") == "It was written by William Shakespeare in 1597."
        assert later[-1] == ("end", "")
        assert ("settled", "1") in later and sched.settled, "settled once the final's reply confirmed the oracle"
        assert any(a.get("quiet") for a in timeline.of_kind(tl.LLM_ADOPT))
        await sched.aclose()


async def second_reply(first: list[str], partial: str, final: str, second: str, said: str = "", **cfg):
    """A partial's stream answers `first` (its tokens) to the end; the front-end has said `said` of it; the
    final's stream answers `second`. Returns the scheduler, its timeline and what was emitted after the final
    (the settled flags left out)."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=first)) as srv:
        sched, timeline, emitted = make(srv, **cfg)
        if cfg.get("restate"):
            sched.ttfts.append(0.1)  # an LLM that answers soon: the short opening ("It has")
        sched.on_partial(partial)
        await until(lambda: ("end", "") in emitted)
        if said:
            sched.conv.on_assistant(said)
        srv.behaviour.tokens = [w if i == 0 else " " + w for i, w in enumerate(second.split())]
        n = len(emitted)
        sched.on_final(final)
        await until(lambda: not sched.in_flight)
        await sched.aclose()
    return sched, timeline, [e for e in emitted[n:] if e[0] != "settled"]


@pytest.mark.parametrize("second, events, appended", [
    ("It is Neptune.", [], ""),  # the same reply again: nothing but the settled flag
    ("It is Jupiter.", ["reset", "end"], "It is Jupiter."),  # another reply: a reset, and all of it
])
async def test_a_newer_stream_of_the_turn_resets_the_oracle_only_when_it_says_something_else(second, events, appended):
    sched, timeline, later = await second_reply(["It", " is", " Neptune."], "what is the largest planet",
                                                "What is the largest planet in the solar system?", second)
    assert [k for k, _ in later if k != "append"] == events
    assert "".join(t for k, t in later if k == "append") == appended


@pytest.mark.parametrize("second, events, appended", [
    ("A spider has 8 legs.", [], ""),  # the held answer again, as "It has 8 legs.": kept
    # another answer: a reset, and the reply spliced into the opening that goes on from the "A" said
    ("It has 12.", ["reset", "end"], "A spider has 12."),
])
async def test_an_opening_that_begins_otherwise_than_the_answer_held_waits_for_the_reply(second, events, appended):
    """An answer held from a partial that had no opening ("...a spider hat?"), its first word said: the stream of
    the whole question is judged once its reply tells the answer, so the same answer resets nothing (its
    opening "It has", said at once, reset it, and the front-end said "A sorry, It has 8 legs.")."""
    sched, timeline, later = await second_reply(["A", " spider", " has", " 8", " legs."], "How many legs does a spider hat?",
                                                "How many legs does a spider have?", second, said="A", restate=True)
    assert [k for k, _ in later if k != "append"] == events
    assert "".join(t for k, t in later if k == "append") == appended
    assert sched.settled


@pytest.mark.parametrize("second, events, appended", [
    # the answer held in other words: kept, nothing sent
    ("It was written by renowned English playwright William Shakespeare.", [], ""),
    ("William Shakespeare.", [], ""),  # less of it
    ("It was written by Christopher Marlowe.", ["reset", "end"], "It was written by Christopher Marlowe."),
    ("It was not written by William Shakespeare.", ["reset", "end"], "It was not written by William Shakespeare."),
])
async def test_a_newer_reply_with_the_answer_held_in_other_words_keeps_it(second, events, appended):
    sched, timeline, later = await second_reply(["It", " was", " written", " by", " William", " Shakespeare."],
                                                "Who wrote the play Romeo", "Who wrote the play Romeo and Juliet?",
                                                second, said="It was")
    assert [k for k, _ in later if k != "append"] == events
    assert "".join(t for k, t in later if k == "append") == appended
    assert sched.settled
    assert bool([k for k in timeline.of_kind(tl.LLM_KEEP) if "other words" in k.get("reason", "")]) == (not events)


def test_same_answer_compares_what_two_replies_answer():
    from tandem.think.same_answer import same_answer

    assert same_answer("A spider has 8 legs.", "It has eight legs.")
    assert same_answer("It has eight legs.", "A spider has 8 legs.")
    assert same_answer("It is Paris.", "It is.")  # says less: the held answer stands
    assert not same_answer("It is New York City.", "It is Paris.")
    assert not same_answer("It is 12.", "It has 8 legs.")
    assert not same_answer("It is Sydney.", "It is not Sydney, it is Canberra.")
    assert not same_answer("It was written.", "It was written by Shakespeare."), "held names no answer"
    assert not same_answer("It is", "It is Paris.")


async def test_an_earlier_turns_oracle_is_never_kept_for_a_new_turn():
    """Held from the last question, "It is Jupiter." begins as a new reply "It is ..." does: a new turn's
    stream always resets, or the front-end could say the last answer again."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["It", " is", " Jupiter."])) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_final("What is the largest planet?")
        await until(lambda: ("end", "") in emitted)
        sched.conv.on_assistant("It is Jupiter.")
        n = len(emitted)
        sched.on_final("Which planet is the largest again?")
        await until(lambda: not sched.in_flight)
        assert [e for e in emitted[n:] if e[0] != "settled"][0] == ("reset", "")
        await sched.aclose()


async def test_a_reply_dropped_by_an_interruption_is_not_kept_for_the_next_stream():
    """The user went on with the question after a pause in which the front-end began the reply, and the
    interruption dropped it: the next stream that says the same words resets the oracle, so the front-end
    gets a fresh start token (its answer to wait for). Without the drop, it is kept quietly."""
    for dropped in (False, True):
        with FakeOpenAIServer(FakeLLMBehaviour(tokens=["It", " was", " written", " by"])) as srv:
            sched, timeline, emitted = make(srv)
            sched.on_partial("Who wrote the play")
            await until(lambda: ("end", "") in emitted)
            if dropped:
                sched.reply_dropped()
            n = len(emitted)
            sched.on_partial("Who wrote the play Romeo and Juliet?")
            await until(lambda: sched.stats["starts"] == 2 and not sched.in_flight)
            later = [k for k, _ in emitted[n:] if k != "settled"]
            assert (later[:1] == ["restart"]) == dropped, (dropped, later)
            assert "reset" not in later, "no plain reset: the agreeing stream is kept, or restarted whole"
            await sched.aclose()


async def test_a_stream_the_final_kept_stays_settled_as_its_reply_goes_on():
    """The final kept the partial's stream (the same words), adopted quietly over the held oracle: the
    words it adds later must not unsettle the oracle, or the front-end stops reading the answer ahead."""
    words = ["It", " was", " written", " by", " William", " Shakespeare."]
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=words[:4])) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("Who wrote the play")
        await until(lambda: ("end", "") in emitted)
        srv.behaviour.tokens, srv.behaviour.token_delay_s = words, 0.1
        sched.on_partial("Who wrote the play Romeo and Juliet?")  # a stream that agrees: adopted quietly
        await until(lambda: any(a.get("quiet") for a in timeline.of_kind(tl.LLM_ADOPT)))
        sched.on_final("Who wrote the play Romeo and Juliet?")  # the same words: kept
        assert timeline.of_kind(tl.LLM_KEEP)
        await until(lambda: sched.settled)  # once its reply has said what is held
        await until(lambda: not sched.in_flight)
        assert "".join(t for k, t in emitted if k == "append").endswith("William Shakespeare.")
        assert sched.settled, [e for e in emitted if e[0] == "settled"]
        await sched.aclose()


async def test_an_older_streams_answer_held_is_not_settled_by_the_final_keeping_a_newer_stream():
    """A partial's stream ("What is the capital?") left "It is New York City." in the oracle; the paused
    partial's stream, adopted quietly, has said only "It is" when the final (the same words) keeps it: the
    oracle is not settled then (the front-end would read "New York City." ahead as the final's answer), and is
    once that stream's reply replaces it."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["It", " is", " New", " York", " City."])) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("What is the capital?")
        await until(lambda: ("end", "") in emitted)
        srv.behaviour.tokens, srv.behaviour.token_delay_s = ["It", " is", " Paris."], 0.3
        sched.on_partial("What is the capital of France?", paused=True)
        await until(lambda: any(a.get("quiet") for a in timeline.of_kind(tl.LLM_ADOPT)))
        sched.on_final("What is the capital of France?")
        assert timeline.of_kind(tl.LLM_KEEP), "the final is the paused partial's words: its stream is kept"
        assert not sched.settled, "what is held is still the older stream's guess"
        await until(lambda: not sched.in_flight)
        assert sched.settled and emitted[-1] == ("end", "")
        assert "".join(t for k, t in emitted[[i for i, e in enumerate(emitted) if e[0] == "reset"][-1]:] if k == "append") == "It is Paris."
        await sched.aclose()


def test_a_fresh_reset_feeds_the_start_token_again_under_every_policy():
    """After a dropped reply the same words come again: the prefix policy would go on with the oracle it
    fed (no start token, nothing new), and a hushed front-end would have no answer to take its turn with.
    A fresh reset feeds the start token at once, then the new oracle's tokens."""
    from tandem.think.oracle import POLICIES, OracleStream

    START_ID, PAD_ID = 2, 0
    for name, policy in POLICIES.items():
        for fresh in (False, True):
            o = OracleStream(START_ID, PAD_ID, policy())
            o.reset(0)
            o.append([10, 11, 12], 0)
            fed = [o.token(k) for k in range(6)]
            assert fed[:4] == [START_ID, 10, 11, 12]
            o.reset(6, fresh=fresh)
            o.append([10, 11, 12], 6)
            again = [o.token(k) for k in range(6, 12)]
            if fresh or name == "kame" or name == "late-playback":
                assert again[:4] == [START_ID, 10, 11, 12], (name, fresh, again)
            else:
                assert START_ID not in again, (name, again)  # the prefix policy keeps what repeats it


async def test_a_fallback_held_is_not_kept_by_a_stream_that_begins_as_it_does():
    """A partial's stream gave nothing the opening could go on with ("It is" + the fallback): the final's stream,
    opening "It is" too, resets it rather than keep "something I am not sure of" as the answer."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=[])) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.ttfts.append(0.1)
        sched.on_partial("What is the capital of France")
        await until(lambda: ("end", "") in emitted)
        assert "not sure" in "".join(t for k, t in emitted if k == "append")
        srv.behaviour.tokens = ["It", " is", " Paris."]
        n = len(emitted)
        sched.on_final("What is the capital of France?")
        assert ("reset", "") in emitted[n:], "at once, with the opening: the fallback is not read on meanwhile"
        await until(lambda: not sched.in_flight)
        later = [e for e in emitted[n:] if e[0] != "settled"]
        assert "".join(t for k, t in later if k == "append").split() == ["It", "is", "Paris."]
        await sched.aclose()


async def test_before_the_front_end_says_the_held_answer_a_newer_reply_goes_at_once():
    """Nothing of the held answer said yet: no repair to spare, so the newer stream (of more of the question)
    resets the oracle at once with its opening, and a wrong guess held is not read while its reply comes."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["A", " spider", " has", " 8", " legs."])) as srv:
        sched, timeline, emitted = make(srv, restate=True)
        sched.ttfts.append(0.1)
        sched.on_partial("How many legs does a spider hat?")
        await until(lambda: ("end", "") in emitted)
        n = len(emitted)
        sched.on_final("How many legs does a spider have?")
        assert ("reset", "") in emitted[n:], "at once, with the opening"
        await until(lambda: not sched.in_flight)
        await sched.aclose()


@pytest.mark.parametrize("new_turn", [False, True])
async def test_a_reply_dropped_by_the_turns_own_words_gets_its_answer_fed_again(new_turn):
    """The front-end began "It was" while the user still asked; the final's words dropped it, and the final's
    stream agreed with the held answer, so nothing new came for the hushed front-end. The settled answer is
    fed afresh at once. Not where a new turn's words dropped the reply: that turn's stream brings its answer."""
    words = ["It", " was", " written", " by", " William", " Shakespeare."]
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=words)) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("Who wrote the play Romeo and Juliet?")
        await until(lambda: ("end", "") in emitted)
        sched.conv.on_assistant("It was")
        sched.on_final("Who wrote the play Romeo and Juliet?")
        assert sched.settled
        if new_turn:
            sched.on_partial("No wait")
        n = len(emitted)
        sched.reply_dropped(by_words=True)
        later = [e for e in emitted[n:] if e[0] != "settled"]
        if new_turn:
            assert later == []
        else:
            assert later == [("restart", ""), ("append", "It was written by William Shakespeare."), ("end", "")]
        await sched.aclose()


async def test_a_reply_dropped_by_the_turns_own_words_before_the_final_gets_its_answer_once_the_final_keeps_it():
    """The front-end said "It" in a pause inside the question ("...Romeo and [pause] Juliet?"); "Juliet" dropped
    it before the answer was settled, the final kept the stream (the same words) and no newer stream came: the
    hushed front-end waited and the turn got nothing. The answer is fed afresh once the final settles it."""
    words = ["It", " was", " written", " by", " William", " Shakespeare."]
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=words)) as srv:
        sched, timeline, emitted = make(srv)
        sched.on_partial("Who wrote the play Romeo and Juliet?")
        await until(lambda: ("end", "") in emitted)
        assert not sched.settled
        sched.conv.on_assistant("It")
        n = len(emitted)
        sched.reply_dropped(by_words=True)
        assert emitted[n:] == [], "nothing settled to feed yet"
        sched.on_final("Who wrote the play Romeo and Juliet?")
        assert sched.settled and sched.stats["kept"] == 1
        later = [e for e in emitted[n:] if e[0] != "settled"]
        assert later == [("restart", ""), ("append", "It was written by William Shakespeare."), ("end", "")]
        await sched.aclose()


async def test_a_failing_check_is_reported_once_and_the_ticker_goes_on():
    """The ticker is a task nobody awaits: an exception would end it unseen, and no later turn would start
    a stream. It is reported once (an `error` on the timeline) while the same error repeats, and ticking goes on."""
    with FakeOpenAIServer() as srv:
        sched, timeline, emitted = make(srv, check_interval_s=0.01)
        calls = {"n": 0}
        real_check = sched.check

        def flaky() -> None:
            calls["n"] += 1
            if calls["n"] <= 3:
                raise RuntimeError("boom")
            real_check()

        sched.check = flaky
        sched.start()
        await until(lambda: calls["n"] >= 6)
        errors = timeline.of_kind(tl.ERROR)
        assert [e["source"] for e in errors] == ["scheduler"]
        assert "RuntimeError: boom" in errors[0]["error"]
        await sched.aclose()


async def test_a_stream_started_while_the_voice_says_the_partials_words_goes_on_from_them():
    """The voice said the partial's "The" as the user's last words came: the stream of the whole question
    opens with the full opening that begins with it, not the short "It is" ("The... sorry, it is the blue
    whale."); while the voice is silent, a partial's stream opens afresh."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=[" the", " blue", " whale", "."], first_token_delay_s=0.2)) as srv:
        sched, timeline, emitted = make(srv, prefill=True, restate=True)  # the LLM goes on from the opening
        sched.ttfts.append(0.1)  # an LLM that answers soon: openings said short
        sched.on_partial("what is the tallest animal in")
        sched.conv.on_assistant("The")
        sched.on_partial("What is the tallest animal in the world?")
        assert timeline.of_kind(tl.RESTATE)[-1]["text"] == "It is", "the voice is silent: no reply to go on"
        sched.talking = lambda: True
        sched.on_final("What is the tallest animal in the world, then?")
        restated = timeline.of_kind(tl.RESTATE)[-1]
        assert (restated["text"], restated["said"]) == ("The tallest animal in the world is", "The")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        last_reset = max(i for i, (k, _) in enumerate(emitted) if k == "reset")
        assert "".join(t for k, t in emitted[last_reset:] if k == "append") == \
            "The tallest animal in the world is the blue whale."
        await sched.aclose()


@pytest.mark.parametrize("said, prefilled", [
    ("It is the", "It is the"),  # fits the question: the LLM goes on from it
    ("The Earth's", None),  # a word the question does not hold: the reply repairs it
    ("It is the Sun.", None),  # a whole sentence said: nothing to go on from
])
async def test_an_llm_that_continues_replies_goes_on_from_the_words_said_where_they_fit(said, prefilled):
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=[" largest", " one", " is", " Jupiter", "."])) as srv:
        sched, timeline, emitted = make(srv, prefill=True, restate=True)
        sched.on_partial("which planet is the")
        sched.conv.on_assistant(said)
        sched.on_final("Which planet is the largest?")  # no opening restates it
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        last = srv.requests[-1]["body"]["messages"][-1]
        assert (last["content"] if last["role"] == "assistant" else None) == prefilled
        await sched.aclose()


async def test_without_continue_said_a_final_after_the_reply_began_is_asked_afresh():
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=["Jupiter", "."])) as srv:
        sched, timeline, emitted = make(srv, prefill=True, restate=True, continue_said=False)
        sched.on_partial("which planet is the")
        sched.conv.on_assistant("It is the")
        sched.on_final("Which planet is the largest?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        assert srv.requests[-1]["body"]["messages"][-1]["role"] == "user"
        await sched.aclose()


@pytest.mark.parametrize("said", ["It is", ""])
async def test_the_llm_never_goes_on_from_an_opening_whose_subject_the_final_changed(said):
    """The short "It is" fits any question, its full "The capital of Austria is" not the final's "...of Australia?":
    the LLM, going on from the old subject, answered it ("It is Vienna." was said for Australia)."""
    with FakeOpenAIServer(FakeLLMBehaviour(tokens=[" Canberra", "."])) as srv:
        sched, timeline, emitted = make(srv, prefill=True, restate=True)
        sched.ttfts.append(0.1)  # an LLM that answers soon: openings said short
        sched.on_partial("What is the capital of Austria?")
        await until(lambda: bool(timeline.of_kind(tl.LLM_DONE)))
        sched.conv.on_assistant(said)
        sched.on_final("What is the capital of Australia?")
        await until(lambda: len(timeline.of_kind(tl.LLM_DONE)) == 2)
        prefills = [r["body"]["messages"][-1]["content"] for r in srv.requests]
        assert prefills == ["The capital of Austria is", "The capital of Australia is"]
        assert timeline.of_kind(tl.RESTATE)[-1]["text"] == "It is"
        await sched.aclose()
