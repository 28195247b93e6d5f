"""Synthetic, time-aligned dialogues: varied user turns with word timings, pauses and fillers, and
the assistant replies they call for.

Entities are invented names built from syllables, split into a training and a held-out set by a
hash, so a copy test measures copying, not memory. Nothing here uses the spoken-question sets.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "cr",
          "dr", "gr", "pr", "st", "tr", "sh", "ch", "th", "bl", "fl", "gl", "pl", "sl", "kl", "qu", "sk", "sn"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "ia", "ee", "oa", "y"]
CODAS = ["", "", "", "n", "r", "l", "s", "th", "x", "m", "nd", "rt", "ck", "sh"]
NUMBERS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "fifteen", "twenty",
           "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "a hundred", "two hundred",
           "a thousand", "forty two", "seventeen", "eleven", "nineteen", "thirteen", "sixty four"]


def _name(rng: random.Random) -> str:
    n = rng.choice([2, 2, 2, 3, 3])
    sylls = [[rng.choice(ONSETS), rng.choice(VOWELS), rng.choice(CODAS)] for _ in range(n)]
    # real names often start with a vowel or double a consonant ("Ottawa", "Canberra"): their pieces
    # repeat, which is what makes copying them hard
    if rng.random() < 0.25:
        sylls[0][0] = ""
    if rng.random() < 0.25:
        i = rng.randrange(1, n)
        if len(sylls[i][0]) == 1 and not sylls[i - 1][2]:
            sylls[i][0] *= 2
    return "".join("".join(p) for p in sylls).capitalize()


def is_heldout(name: str) -> bool:
    return zlib.crc32(name.lower().encode()) % 10 == 0


def entity(rng: random.Random, heldout: bool) -> str:
    while True:
        name = _name(rng)
        if 3 <= len(name) <= 14 and is_heldout(name) == heldout:
            return name


def answer_entity(rng: random.Random, heldout: bool) -> str:
    """An answer as real ones come: often one name, sometimes two words ("New Delhi", "George Orwell")."""
    r = rng.random()
    if r < 0.15:
        return f"{rng.choice(PLACE_WORDS)} {entity(rng, heldout)}"
    if r < 0.3:
        return f"{entity(rng, heldout)} {entity(rng, heldout)}"
    return entity(rng, heldout)


def number(rng: random.Random) -> str:
    """LLMs write numbers as digits about as often as in words."""
    if rng.random() < 0.5:
        return rng.choice(NUMBERS)
    return str(rng.choice([rng.randint(2, 12), rng.randint(13, 99), rng.randint(100, 999), rng.randint(1000, 9999)]))


# (question templates, reply templates); {a}, {b} are entities, {n} a number, {y} a year
QA = [
    (["what is the capital of {a}", "what's the capital city of {a}", "which city is the capital of {a}",
      "do you know the capital of {a}", "can you tell me the capital of {a}"],
     ["The capital of {a} is {b}.", "{b} is the capital of {a}.", "It is {b}.", "That would be {b}."]),
    (["who wrote {a}", "who is the author of {a}", "do you know who wrote the book {a}"],
     ["{a} was written by {b}.", "It was written by {b}.", "{b} wrote it."]),
    (["who invented the {a}", "who came up with the {a}"],
     ["The {a} was invented by {b}.", "{b} invented it."]),
    (["how many {a} are there in a {b}", "how many {a} does a {b} have"],
     ["There are {n} {a} in a {b}.", "A {b} has {n} {a}.", "{n}."]),
    (["where is {a}", "where can I find {a}", "in which country is {a}"],
     ["{a} is in {b}.", "You will find {a} in {b}.", "It is in {b}."]),
    (["what is the largest city in {a}", "what's the biggest city in {a}"],
     ["The largest city in {a} is {b}.", "It is {b}."]),
    (["what language do people speak in {a}", "which language is spoken in {a}"],
     ["People in {a} speak {b}.", "They speak {b}."]),
    (["who painted {a}", "who made the painting {a}"],
     ["{a} was painted by {b}.", "{b} painted it."]),
    (["what is {a} made of", "what is the main ingredient of {a}"],
     ["{a} is made of {b}.", "Mostly {b}."]),
    (["what is the currency of {a}", "what money do they use in {a}"],
     ["The currency of {a} is the {b}.", "They use the {b}."]),
    (["how old is {a}", "how long ago was {a} built"],
     ["{a} is about {n} years old.", "About {n} years."]),
    (["in what year was {a} founded", "when was {a} built", "what year did {a} end"],
     ["{a} dates from {y}.", "It was in {y}.", "In {y}."]),
]
PLACE_WORDS = ["New", "Mount", "San", "Saint", "Lake", "Port", "El", "North", "Great"]
SMALL_TALK = [
    (["how are you today", "how are you doing", "how is it going"],
     ["I am doing well, thanks for asking.", "Pretty good, thank you. How about you?"]),
    (["thank you", "thanks a lot", "that's great, thanks"], ["You are welcome.", "Happy to help."]),
    (["can you hear me", "are you there"], ["Yes, I can hear you.", "I am here."]),
    (["good morning", "hi there", "hello"], ["Hello! How can I help?", "Hi! What can I do for you?"]),
]
STATEMENTS = [
    (["I just got back from {a}", "I spent the weekend in {a}", "my friend moved to {a}"],
     ["Oh nice, how was {a}?", "That sounds lovely. Did you like {a}?", "{a}, how exciting!"]),
    (["I am reading a book called {a}", "I started learning about {a}"],
     ["{a} sounds interesting. What is it about?", "Nice, tell me more about {a}."]),
]
PREAMBLES = ["so", "okay so", "hey", "quick question", "I was wondering", "um", "well", "hey there", "alright",
             "I have a question", "tell me", "so I was thinking"]
FILLERS = ["um", "uh", "like", "you know", "hmm", "er"]
LEAD_INS = ["I'm planning a trip.", "I have a quiz tomorrow.", "My kid asked me this.", "This is for a crossword.",
            "I always forget this.", "Sorry, one more thing."]
BACKCHANNELS = ["mm-hmm", "uh-huh", "yeah", "okay", "right", "I see", "yes", "mm", "sure", "got it"]
BACKCHANNEL_S = (0.2, 0.6)  # how long one lasts (said as one word: "mm-hmm", "I see")
CHARS_PER_S_USER = (11.0, 17.0)  # speaking-rate range for user turns


@dataclass
class Word:
    text: str
    start: float
    end: float


@dataclass
class Turn:
    words: list[Word]  # user words with times (seconds from dialogue start)
    text: str  # the clean transcript, with its end punctuation
    reply: str  # the assistant's true reply
    kind: str  # "question" | "small_talk" | "statement" | "backchannel"
    answer: str | None = None  # the entity or number the reply hinges on (questions only)
    over: bool = False  # spoken over the assistant's previous reply (an interruption or a backchannel)

    @property
    def start(self) -> float:
        return self.words[0].start

    @property
    def end(self) -> float:
        return self.words[-1].end


@dataclass
class Dialogue:
    turns: list[Turn] = field(default_factory=list)
    duration: float = 0.0


def _fill(tpl: str, ents: dict[str, str]) -> str:
    return tpl.format(**ents)


def make_turn_text(rng: random.Random, heldout: bool) -> tuple[list[str], str, str, str, str | None]:
    """(spoken words incl. fillers, clean text, reply, kind, answer)."""
    r = rng.random()
    pool, kind = (QA, "question") if r < 0.7 else (SMALL_TALK, "small_talk") if r < 0.82 else (STATEMENTS, "statement")
    qs, rs = rng.choice(pool)
    ents = {"a": entity(rng, heldout), "b": answer_entity(rng, heldout), "n": number(rng),
            "y": str(rng.randint(1000, 2024))}
    if kind == "question" and "{a}" in qs[0] and rng.random() < 0.3:
        ents["a"] = ents["a"].lower() if "{a} are" in qs[0] else ents["a"]
    q = _fill(rng.choice(qs), ents)
    reply_tpl = rng.choice(rs)
    reply = _fill(reply_tpl, ents)
    answer = None
    if kind == "question":
        if "{b}" in reply_tpl and ents["b"] not in q:
            answer = ents["b"]
        elif "{n}" in reply_tpl:
            answer = ents["n"]
        elif "{y}" in reply_tpl:
            answer = ents["y"]
    end = "?" if kind == "question" or q.startswith(("how", "can", "are")) else "."
    clean = q[0].upper() + q[1:] + end
    words = q.split()
    if rng.random() < 0.35:
        words = rng.choice(PREAMBLES).split() + words
    if rng.random() < 0.15:
        words = rng.choice(LEAD_INS).split() + words
    spoken: list[str] = []
    for w in words:
        if rng.random() < 0.06:
            spoken += rng.choice(FILLERS).split()
        spoken.append(w)
        if rng.random() < 0.03:
            spoken.append(w)  # a hesitation repeat
    spoken[-1] = spoken[-1] + end
    return spoken, clean, reply, kind, answer


def time_words(rng: random.Random, words: list[str], t0: float, pause_p: float = 0.25) -> list[Word]:
    rate = rng.uniform(*CHARS_PER_S_USER)
    out, t = [], t0
    pause_at = rng.randrange(1, len(words)) if len(words) > 2 and rng.random() < pause_p else -1
    for i, w in enumerate(words):
        if i == pause_at:
            t += rng.uniform(0.2, 0.8)  # a pause inside the turn: not its end
        dur = max(0.12, (len(w) + 1) / rate * rng.uniform(0.8, 1.2))
        out.append(Word(w, t, t + dur))
        t += dur + rng.uniform(0.0, 0.06)
    return out


def reply_duration(reply: str) -> float:
    return len(reply) * 0.068 + 0.3  # hibari's pace, measured: about 0.068 s per character


def make_dialogue(rng: random.Random, heldout: bool = False, n_turns: int | None = None, talk_over_p: float = 0.0,
                  talk_over_kind: str | None = None) -> Dialogue:
    """`talk_over_p`: the chance that a turn after the first is spoken over the assistant's reply to
    the previous one: a backchannel ("mm-hmm", the reply goes on) or an interruption (a new turn,
    the reply stops), half each unless `talk_over_kind` names one."""
    n = n_turns or rng.choice([1, 1, 2, 2, 3])
    d = Dialogue()
    t = rng.uniform(0.3, 1.5)
    for i in range(n):
        interrupting = False
        if i > 0 and talk_over_p > 0 and rng.random() < talk_over_p:
            prev = d.turns[-1]
            reply_s = reply_duration(prev.reply)
            onset = prev.end + 0.3 + rng.uniform(0.6, max(0.7, 0.75 * reply_s))
            kind = talk_over_kind or rng.choice(["backchannel", "interruption"])
            if kind == "backchannel":
                text = rng.choice(BACKCHANNELS)
                words = [Word(text + ".", onset, onset + rng.uniform(*BACKCHANNEL_S))]
                d.turns.append(Turn(words, text[0].upper() + text[1:] + ".", "", "backchannel", over=True))
                t = max(t, words[-1].end + rng.uniform(0.3, 2.0))  # the reply goes on; the next turn after it
                continue
            t, interrupting = onset, True
        spoken, clean, reply, kind, answer = make_turn_text(rng, heldout)
        words = time_words(rng, spoken, t)
        d.turns.append(Turn(words, clean, reply, kind, answer, over=interrupting))
        t = words[-1].end + 0.3 + reply_duration(reply) + rng.uniform(0.3, 2.0)
    # room after the last turn for a late oracle, a replaced answer or a fallback, and the silence after
    d.duration = max(t, d.turns[-1].end + 2 * reply_duration(d.turns[-1].reply) + 5.0)
    return d


def opening_of(turn: Turn) -> str | None:
    """The words of the reply before its answer ("The capital of Xa is" for "The capital of Xa is
    Yb."), as the back-end restates them from the question; None when the answer comes first or
    the opening is a single word."""
    if not turn.answer or turn.answer not in turn.reply:
        return None
    opening = turn.reply[: turn.reply.index(turn.answer)].strip()
    return opening if len(opening.split()) >= 2 else None


def other_reply(rng: random.Random, heldout: bool) -> str:
    """A reply from another dialogue: an oracle that guessed without knowing the question."""
    return make_turn_text(rng, heldout)[2]


def wrong_version(rng: random.Random, reply: str, heldout: bool) -> str:
    """The reply with one of its names replaced: the right shape with the wrong fact."""
    words = reply.split()
    caps = [i for i, w in enumerate(words) if w[:1].isupper() and i > 0]
    if not caps:
        return other_reply(rng, heldout)
    i = rng.choice(caps)
    tail = "".join(c for c in words[i] if not c.isalnum())
    words[i] = entity(rng, heldout) + tail
    return " ".join(words)
