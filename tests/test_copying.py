"""The copy-exactness measure: names and numbers of the last oracle said whole and in order."""
import pytest

from tandem.bench.copying import copied_exactly, exact_pct, key_words


@pytest.mark.parametrize("oracle, keys", [
    ("The capital of Mexico is Mexico City.", ["mexico", "mexico", "city"]),
    ("Paris is the capital of France.", ["paris", "france"]),
    ("There are 206 bones in the human body.", ["206"]),
    ("About forty years.", ["forty"]),
    ("It is in Ottawa. It was founded in 1857.", ["ottawa", "1857"]),  # key_words sees every sentence
    ("I am doing well, thanks for asking.", []),
    ("Yes, I can hear you.", []),
])
def test_key_words_are_the_names_and_numbers(oracle, keys):
    assert key_words(oracle) == keys


@pytest.mark.parametrize("said, oracle, exact", [
    ("Let me think. The capital of Canada is Ottawa.", "The capital of Canada is Ottawa.", True),
    ("The capital is Ott awa.", "The capital of Canada is Ottawa.", False),  # a name in pieces
    ("Tushteer tcresh invented it.", "Tushteertcresh invented it.", False),
    ("It is Eackgrom, sorry, it is Port Carbleash.", "It is Port Carbleash.", True),  # a repair, then exact
    ("It is Carbleash Port.", "It is Port Carbleash.", False),  # out of order
    ("There are 260 bones.", "There are 206 bones.", False),
    ("I am fine.", "I am doing well, thanks for asking.", None),  # nothing the measure can judge
    ("Paris. It is", "It is Paris. It has 2 million people.", True),  # the answer sentence, not the rest
])
def test_copied_exactly(said, oracle, exact):
    assert copied_exactly(said, oracle) is exact


def test_exact_pct_counts_only_judged_pairs():
    pct, n = exact_pct([("Paris.", "It is Paris."), ("Par is.", "It is Paris."), ("Fine.", "I am fine.")])
    assert (pct, n) == (50.0, 2)
    assert exact_pct([]) == (None, 0)


def test_the_last_oracle_is_the_text_appended_since_the_last_reset():
    from tandem.bench.copying import last_oracle_text

    ev = [{"kind": "oracle_reset", "t": 1.0}, {"kind": "oracle_append", "t": 1.0, "text": "It is Rome."},
          {"kind": "assistant_text", "t": 1.5, "text": "It"},
          {"kind": "oracle_reset", "t": 2.0}, {"kind": "oracle_append", "t": 2.0, "text": "The capital is"},
          {"kind": "oracle_append", "t": 2.5, "text": "Paris."}]  # whole words, as a session hands them
    assert last_oracle_text({"events": ev}) == "The capital is Paris."
    assert last_oracle_text({"events": []}) == ""


def test_a_reply_cut_by_the_end_of_the_recording_is_told_from_a_garbled_one():
    from tandem.bench.copying import cut_short

    oracle = "The area of Antarctica is 14.2 million square kilometers."
    assert cut_short("The area of Antarctica is 14", oracle), "stopped right after a key word it got right"
    assert cut_short("The area of", oracle), "stopped before the first key word"
    assert not cut_short("The area of the world is large and cold", oracle), "went on past a wrong word"
    assert not cut_short("The area of Antarctica is 14.2 million square kilometers.", oracle), "not short at all"
