import numpy as np
from tandem.turn.cascade import SentenceChunker
from tandem.turn.conversation import Conversation
from tandem.llm.prompt import answer_messages, oracle_messages
from tandem.bench.scoring import Word, find_answer, normalize


def test_sentence_chunker_emits_each_sentence_once_complete():
    c = SentenceChunker()
    assert c.push("The capital") == []
    assert c.push(" is Paris. It is") == ["The capital is Paris."]
    assert c.push(" lovely! Really") == ["It is lovely!"]
    assert c.flush() == ["Really"]
    assert c.flush() == []


def test_sentence_chunker_keeps_decimals_and_abbreviation_free_text_together():
    c = SentenceChunker()
    assert c.push("It is 3.5 km away.") == []
    assert c.flush() == ["It is 3.5 km away."]


def test_conversation_counts_words_of_the_current_turn_and_merges_pieces():
    conv = Conversation()
    conv.on_partial("what is the")
    assert conv.current_user_words() == 3
    conv.on_final("what is the capital")
    conv.on_partial("of France")
    assert conv.current_user_words() == 6
    conv.on_assistant("Paris")
    conv.on_assistant("is the capital.")
    assert conv.turns == [("user", "what is the capital"), ("assistant", "Paris is the capital.")]
    assert conv.current_user_words() == 2  # a new user turn began with the partial


def test_the_reply_under_way_is_left_out_of_what_the_llm_is_asked_with():
    conv = Conversation()
    conv.on_final("which animal is the king of the jungle")
    conv.on_assistant("The lion.")
    assert conv.without_reply_under_way() == conv.turns[:1], "the reply to the user's last turn"
    conv.on_partial("and what is the largest")
    conv.on_assistant("The")  # the front-end began in a pause, before the user went on
    asked = conv.without_reply_under_way()
    assert asked == [("user", "which animal is the king of the jungle"), ("assistant", "The lion.")]
    conv.on_final("and what is the largest animal on earth")
    conv.on_assistant("largest")
    assert conv.turns[-2:] == [("user", "and what is the largest animal on earth"), ("assistant", "The largest")]
    assert conv.without_reply_under_way() == conv.turns[:-1], "the reply begun before the final"


def test_a_reply_cut_to_nothing_leaves_the_users_turn_after_what_was_said():
    conv = Conversation()
    conv.on_final("tell me about the moon")
    conv.on_assistant("The Moon is")
    conv.on_partial("wait")  # the user talks over the reply's first piece, which is cut unheard
    assert conv.unsay("The Moon is", 0.0) == "The Moon is"
    conv.on_assistant("Sure")  # a new reply, begun before the interruption's final
    assert conv.reply_under_way()
    assert conv.without_reply_under_way() == [("user", "tell me about the moon")]
    conv.on_final("wait, how far is it")
    assert conv.turns == [("user", "tell me about the moon wait, how far is it"), ("assistant", "Sure")]


def test_prompts_carry_the_dialogue_and_the_partial():
    turns = [("user", "hi"), ("assistant", "hello")]
    msgs = oracle_messages(turns, "what is the capital of")
    assert msgs[0]["role"] == "system" and "30 words" in msgs[0]["content"]
    assert msgs[1]["content"] == "user: hi\nassistant: Hello\nuser: what is the capital of"
    auto = answer_messages(turns, "what is the capital of", form="auto")
    assert [m["role"] for m in auto] == ["system", "user", "assistant", "user"], "chat once the assistant spoke"
    first = answer_messages([], "what is the capital of", form="auto")
    assert first == oracle_messages([], "what is the capital of"), "lines for a first question"
    # the default: chat in every turn, so a follow-up's prompt begins as the first question's did (a
    # server that keeps the last prompt's state evaluates only what was added)
    one = answer_messages([], "what is the capital of Canada")
    two = answer_messages([("user", "what is the capital of Canada"), ("assistant", "Ottawa.")], "and of Australia")
    assert two[: len(one)] == one


def test_passages_go_into_the_system_message_of_either_form():
    facts = ["Policies: Warranty: Every product carries a warranty of two years."]
    for form in ("lines", "chat"):
        msgs = answer_messages([("user", "how long is the warranty")], context=facts, form=form)
        assert "two years" in msgs[0]["content"] and "do not say" in msgs[0]["content"]
        assert "two years" not in msgs[-1]["content"]
    assert "facts" not in answer_messages([("user", "hi")])[0]["content"], "no passages, no instruction"


def test_the_chat_form_of_the_oracle_prompt_gives_each_turn_its_own_message():
    turns = [("user", "what is the capital of Canada"), ("assistant", "Ottawa."), ("user", "and")]
    msgs = oracle_messages(turns, "of Australia", chat=True)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[-1]["content"] == "and of Australia", "a turn's final and its live partial are one message"
    assert "unfinished" in msgs[0]["content"]


def test_find_answer_matches_multiword_answers_after_a_time():
    words = [Word("Buenos", 1.0, 1.2), Word("Aires.", 1.2, 1.6), Word("Paris", 0.1, 0.3)]
    hit = find_answer(words, ["buenos aires"])
    assert (hit.text, hit.start, hit.end) == ("Buenos Aires.", 1.0, 1.6)
    assert find_answer(words, ["paris"], after=0.5) is None
    assert normalize("Canberra!") == "canberra"


def test_response_gaps_finds_where_the_voice_ran_dry():
    import numpy as np

    from tandem.bench.scoring import response_gaps

    sr = 24000
    tone = (0.3 * np.sin(np.arange(sr // 2) / 5)).astype(np.float32)
    x = np.concatenate([np.zeros(sr), tone, np.zeros(int(0.5 * sr)), tone, np.zeros(int(0.1 * sr)), tone, np.zeros(sr)])
    gaps = response_gaps(x, after=0.5)
    assert len(gaps) == 1 and abs(gaps[0] - 0.5) < 0.05


def test_the_prompt_shows_the_llm_the_current_turn_and_two_exchanges_before_it():
    from tandem.llm.prompt import HISTORY_TURNS, answer_messages

    turns = []
    for i in range(6):
        turns += [("user", f"question {i}?"), ("assistant", f"Answer {i}.")]
    msgs = answer_messages(turns, partial="and the last one")
    assert [m["content"] for m in msgs[1:]] == ["question 4?", "Answer 4.", "question 5?", "Answer 5.",
                                                "and the last one"]
    assert len(msgs) - 1 == HISTORY_TURNS and msgs[1]["role"] == "user"
    lines = answer_messages(turns, partial="and the last one", form="lines")[1]["content"]
    assert lines.splitlines()[0] == "user: question 4?" and "question 3" not in lines
    # a window that would open on the assistant's turn opens on the next user turn instead
    short = answer_messages([("assistant", "Hello."), ("user", "hi"), ("assistant", "Hey."), ("user", "a"),
                             ("assistant", "b"), ("user", "c")])
    assert short[1] == {"role": "user", "content": "hi"}


def test_the_llm_sees_each_reply_as_its_last_self_repair_left_it():
    from tandem.llm.prompt import as_repaired

    assert as_repaired("It is Neptune. sorry, It is Jupiter.") == "It is Jupiter."
    assert as_repaired("It play sorry, It was written by William Shakespeare.") == "It was written by William Shakespeare."
    assert as_repaired("I- sorry, The sorry, The Eiffel Tower is in Paris.") == "The Eiffel Tower is in Paris.", "the last one"
    assert as_repaired("It is Paris.") == "It is Paris."
    assert as_repaired("I am sorry to hear that.") == "I am sorry to hear that.", "only a repair, with its comma"
    assert as_repaired("Sorry,") == "Sorry,", "nothing after it: the reply as said"
    turns = [("user", "what is the largest planet"), ("assistant", "It is Neptune."), ("assistant", "sorry, It is Jupiter."),
             ("user", "how many moons does it have")]
    msgs = answer_messages(turns)
    assert [m["content"] for m in msgs[1:]] == ["what is the largest planet", "It is Jupiter.", "how many moons does it have"]
    lines = answer_messages(turns, form="lines")[1]["content"]
    assert "Neptune" not in lines and "sorry" not in lines


def test_a_context_repeated_is_an_echo_and_a_new_turn_is_not():
    from tandem.listener.worker import echoes, transcribe_in_context

    ctx = "What is the capital of Canada? And of Australia?"
    assert echoes("what is the capital of canada", ctx)
    assert echoes("And of Australia?", ctx)
    assert not echoes("And of Austria?", ctx)
    assert not echoes("", ctx) and not echoes("Canada", ctx)

    class FakeWhisper:  # hears the context again when told one, else the audio's words
        def __init__(self, no_speech_prob: float) -> None:
            self.calls: list[str] = []
            self.no_speech_prob = no_speech_prob

        def transcribe(self, audio, full_context=False, context=""):  # noqa: ANN001, ARG002
            self.calls.append(context)
            return type("T", (), {"text": "And of Australia?" if context else "and of a stray lia",
                                  "no_speech_prob": self.no_speech_prob if context else 0.1})()

        def transcribe_many(self, items, full_context=False):  # noqa: ANN001
            return [self.transcribe(a, full_context, c) for a, c in items]

    w = FakeWhisper(no_speech_prob=0.86)  # the context invented over noise
    got = transcribe_in_context(w, [(np.zeros(10), ctx), (np.zeros(10), "")])
    assert [t.text for t in got] == ["and of a stray lia", "and of a stray lia"]
    assert w.calls == [ctx, "", ""], "only the decode that echoed its context is done again, without it"
    w = FakeWhisper(no_speech_prob=0.02)  # the user asks it again
    assert [t.text for t in transcribe_in_context(w, [(np.zeros(10), ctx)])] == ["And of Australia?"]
    assert w.calls == [ctx], "a repeat Whisper is sure is speech is heard as it was, with no second decode"


def test_the_llm_history_leaves_out_the_front_ends_openers():
    from tandem.llm.prompt import recent_turns
    from tandem.speak.openers import without_openers

    assert without_openers("Well, good question. It is Jupiter. Okay,") == "It is Jupiter."
    assert without_openers("Okay, It has 8 legs.") == "It has 8 legs."
    assert without_openers("Turn right, then left. I think so.") == "Turn right, then left. I think so."
    assert without_openers("good question. Well,") == ""
    turns = [("user", "Who wrote Romeo and Juliet?"), ("assistant", "Well, It was written by William Shakespeare. Well,"),
             ("user", "What is the largest planet?"), ("assistant", "good question. Well,"),
             ("user", "How many legs does a spider have?"), ("assistant", "well, well,"),
             ("user", "What is the capital of France?")]
    assert recent_turns(turns) == [
        ("user", "Who wrote Romeo and Juliet?"), ("assistant", "It was written by William Shakespeare."),
        ("user", "What is the capital of France?")], "an unanswered question goes with its reply"
    assert recent_turns([("user", "Who wrote it?"), ("assistant", "written by William Shakespeare.")])[1] == \
        ("assistant", "Written by William Shakespeare."), "a reply whose first word was cut reads as a sentence"
    gave_up = [("user", "What is the largest planet?"), ("assistant", "It is something I am not sure of, sorry."),
               ("user", "How many legs does a spider have?"), ("assistant", "It has 8 legs."), ("user", "And Paris?")]
    assert recent_turns(gave_up)[0] == ("user", "How many legs does a spider have?"), "a fallback answers nothing"
    repaired = [("user", "What is the largest planet?"), ("assistant", "It is something I am not sure of, sorry. sorry, It is Jupiter."),
                ("user", "How many legs?")]
    assert recent_turns(repaired) == [("user", "What is the largest planet?"), ("assistant", "It is Jupiter."),
                                      ("user", "How many legs?")], "a fallback taken back gave up nothing"
