"""The fluency measure: audible self-repairs read off the heard transcript (tandem/bench/fluency.py)."""
import numpy as np
import pytest

from tandem.audio.frames import SAMPLE_RATE
from tandem.bench.fluency import fluency, fluency_summary, heard_reply, repair_examples, self_repairs
from tandem.bench.scoring import Transcriber, Word


def kinds(text: str, judge_end: bool = True) -> list[str]:
    return [r.kind for r in self_repairs(text, judge_end)]


@pytest.mark.parametrize("text", [
    "It is Paris.",
    "The capital of Japan is Tokyo.",
    "I'm sorry, but I can't help with that.",  # a decline, not a correction
    "I don't know that one, sorry.",  # the front-end's fallback: nothing follows the apology
    "Sorry, I am not sure about that.",
    "It is very very cold there.",  # doubled on purpose
    "It is 4 4 hours away.",  # digits as Whisper writes them
    "The theory of evolution was proposed by... Charles Darwin.",  # a pause inside a long sentence
    "It is on ER wards.",  # an acronym, not "er"
])
def test_fluent_replies_have_no_repair(text):
    assert kinds(text) == []


@pytest.mark.parametrize("text, kind", [
    ("It is not a place but sorry it is Buenos Aires.", "apology"),
    ("In 1945, sorry, the end of World War Two was marked.", "apology"),
    ("It is Vienna, I mean, Canberra.", "apology"),
    ("I- the Eiffel Tower is in Paris.", "restart"),
    ("I'm... the name? The galaxy is called the Milky Way.", "restart"),
    ("The the pyramids are in Egypt.", "repeat"),
    ("It is it is Tokyo.", "repeat"),
    ("It is, um, Tokyo.", "filler"),
    ("The pyramids of Giza are located in -", "unfinished"),
    ("It is the largest...", "unfinished"),
])
def test_each_kind_of_stumble_is_found(text, kind):
    assert kind in kinds(text)


def test_a_reply_cut_by_the_recording_is_not_unfinished():
    assert kinds("The pyramids of Giza are located in -", judge_end=False) == []


class CutTranscriber:
    """Records the audio it is given (a fake: no Whisper)."""

    def __init__(self, text: str) -> None:
        self.text, self.given = text, []

    def words(self, audio, context=None):
        self.given.append((len(audio), context))
        return [Word(w, 0.0, 0.1) for w in self.text.split()]


def test_the_reply_is_heard_over_its_audible_stretch_alone_with_no_prompt():
    x = np.zeros(6 * SAMPLE_RATE, np.float32)
    x[2 * SAMPLE_RATE: 3 * SAMPLE_RATE] = 0.3
    t = CutTranscriber("It is Paris.")
    text, ended = heard_reply(t, x)
    assert text == "It is Paris." and ended
    n, context = t.given[0]
    assert context is None and n == pytest.approx(1.2 * SAMPLE_RATE, abs=2)  # 0.1 s either side, not the silence
    x[-100:] = 0.3  # still talking at the end of the recording
    assert heard_reply(CutTranscriber("It is"), x)[1] is False


def test_a_dialogue_judges_each_reply_and_only_the_last_as_unfinished():
    x = np.zeros(8 * SAMPLE_RATE, np.float32)
    x[1 * SAMPLE_RATE: 2 * SAMPLE_RATE] = 0.3
    x[5 * SAMPLE_RATE: 6 * SAMPLE_RATE] = 0.3
    windows = [(0, 4 * SAMPLE_RATE), (4 * SAMPLE_RATE, 8 * SAMPLE_RATE)]
    rec = fluency(CutTranscriber("It is the largest..."), x, "It is the largest", windows)
    assert [r["kind"] for r in rec["repairs"]] == ["unfinished"]  # the first reply was cut by the next turn
    assert rec["heard_plain"] == "It is the largest... / It is the largest..." and rec["fluent"] is False
    assert rec["repairs_in_text"] == []
    # the voice said its sentence whole and stopped by itself: Whisper's "..." ("It is so..." for "It is Seoul.")
    assert fluency(CutTranscriber("It is so..."), x, "It is Seoul.", windows)["fluent"]


def test_the_summary_counts_replies_and_lists_examples():
    runs = [{"question_id": "q1", "mode": "tandem", "fluent": False, "heard_plain": "It is, sorry, Paris.",
             "repairs": [{"kind": "apology", "at": "x"}], "repairs_in_text": [{"kind": "apology", "at": "x"}]},
            {"question_id": "q2", "mode": "tandem", "fluent": True, "heard_plain": "It is Tokyo.", "repairs": [],
             "repairs_in_text": []}]
    s = fluency_summary(runs)
    assert s["self_repairs"] == "1/2" and s["self_repair_rate"] == 0.5 and s["repair_kinds"] == {"apology": 1}
    assert repair_examples(runs, "question_id") == ['- q1 (tandem; apology): "It is, sorry, Paris."']


@pytest.fixture(scope="module")
def transcriber():
    return Transcriber(threads=1)


def test_a_spoken_repair_is_heard_and_a_clean_reply_is_not(transcriber):
    from tandem.audio.voices import speak

    clean = speak("The capital of France is Paris.", "flite", lead_s=0.5, tail_s=1.0)
    stumble = speak("The capital of France is Lyon, sorry, the capital is Paris.", "flite", lead_s=0.5, tail_s=1.0)
    assert fluency(transcriber, clean, "")["fluent"], fluency(transcriber, clean, "")
    rec = fluency(transcriber, stumble, "")
    assert "apology" in [r["kind"] for r in rec["repairs"]], rec
