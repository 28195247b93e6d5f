"""The role guard on streamed oracle text, piece by piece as a server sends it."""
import pytest

from tandem.llm.role_guard import RoleEchoGuard


def guarded(pieces: list[str]) -> tuple[str, bool]:
    g = RoleEchoGuard()
    out = [g.push(p) for p in pieces] + [g.flush()]
    return "".join(out), g.stopped


@pytest.mark.parametrize("pieces, said, stopped", [
    (["A spider has", " 8 legs."], "A spider has 8 legs.", False),
    (["The", " user", ":", " who wrote"], "The", True),
    (["Paris.\nUser: and", " more"], "Paris.", True),
    (["The a", "ssistant: hi"], "The", True),
    (["user: what is"], "", True),
    (["assistant", ": The", " capital is Paris."], "The capital is Paris.", False),  # a leading role is dropped
    (["The us", "ual answer"], "The usual answer", False),  # held back, then passed on
    (["The user", "name is"], "The username is", False),
    (["The capital", " is a", "ustralia."], "The capital is australia.", False),
    (["It is the us"], "It is the us", False),  # flushed at the end of the stream
    (["The", " user", " asked", " what is"], "", True),  # an echo of the prompt, not a reply
    (["The user's question", " is about"], "", True),
    (["User", " wants to know"], "", True),
    (["The", " capital", " is Paris."], "The capital is Paris.", False),  # "The" waits one piece only
    (["The", " users", " of it"], "The users of it", False),
    # spelled-out letters are no reply: what SmolLM2 made of a hummed "Mm-hmm" heard as "M-H-M-M-"
    (["M", "-H", "-M", "-M", "-I", "-T", "-A", "-N"], "", True),
    (["It is M", "-H", "-M", "-M", "-I"], "It is", True),
    (["M H M M I T"], "", True),
    (["The symbol for silver is A", "-G", "."], "The symbol for silver is A-G.", False),  # a short one is a word
    (["The U", ".S", ". dollar", "."], "The U.S. dollar.", False),
    (["Am", " I", " a", " robot", "?"], "Am I a robot?", False),  # lone letters wait one piece only
])
def test_guard(pieces, said, stopped):
    out, was_stopped = guarded(pieces)
    assert out.strip() == said
    assert was_stopped == stopped


def test_nothing_passes_after_a_stop():
    g = RoleEchoGuard()
    assert g.push("Yes. user: no") == "Yes."
    assert g.push(" more text") == "" and g.flush() == ""
