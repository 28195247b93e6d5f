"""Talked over: a backchannel ("mm-hmm", "yeah") or a real interruption? One rule for every mode.

The voice talks on through the first PAUSE_FRAMES of the user's speech over it (0.48 s, LiveKit
Agents' `min_interruption_duration` is 0.5 s): most backchannels are over by then ("yeah", "mm-hmm",
"I see" take 0.3-0.55 s) and cost no gap at all. Pausing at the third frame, as before, left a
silence over 0.5 s for every "Yeah, yeah" (measured, FDB dev set: talked on 3 of 8). Words that open
an interruption ("wait", "stop", "sorry", a question word) drop the reply as soon as the transcript
shows them. Past PAUSE_FRAMES the voice is *paused* and keeps its place, unless the transcript so far
shows backchannel words only (then it talks on). The burst then decides, frame by frame:
- it ends (END_QUIET_FRAMES without speech) and the transcript shows backchannel words only
  ("mm-hmm", "yeah", "right, I see"), however long it was: RESUME, the voice goes on where it
  paused. Not before its end: "Okay, wait, how many..." is heard as "Okay" first;
- its transcript so far is a hum only ("m", "Mm", "M-H-M", "uh-huh"): RESUME at once, while the
  user still hums. A hum is the one backchannel that does not begin an interruption the way
  "okay" or "yeah" can ("Okay, wait, ..."); the late-words watch below still drops the reply if the
  words go on into a question;
- it ends within WORDS_DECIDE_FRAMES (0.96 s) of speech: RESUME, whatever other words its transcript
  shows, unless they open an interruption. Whisper writes words for a hum it cannot place ("and the
  making", "Amen? Amen?", "I'm at..." for "Mm-hmm" and "Uh-huh" in the FDB dev set), and dropping the
  reply on them is the worst error a backchannel can cause; a longer burst's words are to be trusted;
- the transcript shows other words and the burst is longer than WORDS_DECIDE_FRAMES, or speech goes
  on past MAX_TALKED_OVER_FRAMES: DROP, the voice's queue is dropped (the segment under way is cut
  where it paused) and the reply is over;
- no words yet: a burst no longer than MAX_BACKCHANNEL_FRAMES resumes as soon as it ends; a longer
  one stays paused while the transcript catches up (the front-end model's own END may drop it
  meanwhile: `model_yields`), and resumes if AWAIT_WORDS_FRAMES pass with still no words (a noise).
The transcript lags the speech (a partial needs ~0.3 s of it, a final comes ~0.5 s after it), so
for LATE_WORDS_FRAMES after a resume the decision can still be revised by the same rule: words that
take the turn then drop the reply late, and speech again pauses it at once (the user went on)
unless what it says is still a backchannel.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..speak.frontend import BARGE_IN_FRAMES

FRAME_S = 0.08
# Speech over the voice this long pauses it (unless its words so far are a backchannel's): shorter is
# a backchannel, a cough or the tail of the user's own turn, talked through with no gap.
PAUSE_FRAMES = 6  # 0.48 s
# A backchannel is short: "mm-hmm", "yeah", "I see" take 0.3-0.55 s. A burst no longer than this
# with no words resumes as soon as it ends; a longer one waits for its words. Capped by the silence
# budget: see MAX_SILENCE_S.
MAX_BACKCHANNEL_FRAMES = 7  # 0.56 s of speech
# A burst that ends within this much speech is a backchannel or a noise whatever other words the
# transcript shows for it, unless they open an interruption: Whisper's words for a short hum are guesses.
WORDS_DECIDE_FRAMES = 12  # 0.96 s
# Speech over the voice longer than this takes the turn, whatever the transcript says of it (a
# backchannel heard as one is talked through meanwhile: "Yeah, yeah, I see, okay" said slowly).
MAX_TALKED_OVER_FRAMES = 20  # 1.6 s of speech
# Frames without speech that end a burst. One is not enough: the voice-activity probability the
# front-end sees (one 32 ms window a frame) dips between words, and resuming in such a dip would
# speak a frame over a user who goes on talking.
END_QUIET_FRAMES = 2  # 0.16 s
# A burst longer than a backchannel, with no words heard: how long after it ends the voice stays
# paused for its transcript (the final comes ~0.4-0.6 s after the speech) before it resumes.
AWAIT_WORDS_FRAMES = 8  # 0.64 s
# A burst must be this long before the front-end model's own END drops the reply (`model_yields`):
# by then an interruption's transcript has usually shown its words, a backchannel's its hum.
MODEL_YIELD_FRAMES = 12  # 0.96 s
# How long after a resume the burst's transcript may still turn out to be a real utterance: the
# final comes ~0.4 s (end-of-turn silence) plus a decode after the speech ended.
LATE_WORDS_FRAMES = 15  # 1.2 s
# The longest silence a resumed burst with no words causes: paused at its PAUSE_FRAMES-th speech frame,
# silent through its last (at most the MAX_BACKCHANNEL_FRAMES-th), resumed at the END_QUIET_FRAMES-th quiet frame.
MAX_SILENCE_S = (MAX_BACKCHANNEL_FRAMES - PAUSE_FRAMES + END_QUIET_FRAMES) * FRAME_S

# What users say to show they listen, not to take the turn. Lower case, without punctuation; hums
# ("mm-hmm", "uh-huh", matched as their parts) are _HUM's.
BACKCHANNEL_PHRASES: frozenset[tuple[str, ...]] = frozenset(tuple(p.split()) for p in (
    "yeah", "yes", "yep", "yup", "yea", "ya", "okay", "ok", "right", "sure", "alright", "all right",
    "i see", "got it", "oh", "ah", "aha", "wow", "cool", "nice", "great", "good",
    "exactly", "true", "indeed", "really", "interesting", "of course", "makes sense", "that makes sense",
    "i know", "go on", "fine", "perfect", "absolutely", "definitely", "totally", "thanks", "thank you",
))
_LONGEST = max(len(p) for p in BACKCHANNEL_PHRASES)
# Hums in any spelling a recogniser writes them: "mm", "hmm", "mhm", "uh", "um", "huh", and the
# letters Whisper sometimes spells a hum with ("M H M M").
_HUM = re.compile(r"[mhu][mhnu]{0,5}f?|n")  # "M-N", "mhmm", "uh", "hmm"
_WORD = re.compile(r"[a-z']+")
# Hums that never open a question: m-sounds in any spelling ("m", "mm", "hmm", "mhm", and Whisper's
# spelled "M H M M" or "M-N", whose "h" or "n" counts beside an m), and "uh-huh" whole ("uh" alone may
# go on: "uh, wait").
_M_HUM = re.compile(r"[mhn]+f?")  # "Mmf": Whisper's spelling of espeak's "Mm-hmm"
_UH_HUH = re.compile(r"\buh huh\b")

# Words that open an interruption, and that Whisper does not make up for a hum: heard over the voice
# they drop the reply however short the burst ("Wait", "Stop.", "Sorry, what...", "No, how many...").
OPENERS: frozenset[tuple[str, ...]] = frozenset(tuple(p.split()) for p in (
    "wait", "stop", "hold on", "hang on", "sorry", "excuse me", "pardon", "actually", "no", "but", "never mind",
    "what", "what's", "why", "how", "who", "where", "when", "which", "can", "could", "hey", "listen",
))

PAUSE, RESUME, DROP = "pause", "resume", "drop"


def words_of(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("-", " ").replace("’", "'"))


def is_backchannel(text: str) -> bool:
    """True when `text` has words and all of them are backchannels ("Mm-hmm.", "Yeah, I see.")."""
    words = words_of(text)
    i = 0
    while i < len(words):
        if _HUM.fullmatch(words[i]):
            i += 1
            continue
        n = next((n for n in range(min(_LONGEST, len(words) - i), 0, -1)
                  if tuple(words[i: i + n]) in BACKCHANNEL_PHRASES), 0)
        if not n:
            return False
        i += n
    return bool(words)


def is_hum(text: str) -> bool:
    """True when `text` has words and is only hums that never open a question ("Mm.", "M-H-M-M",
    "Uh-huh"), not words a user may go on from ("uh", "okay", "yeah")."""
    words = words_of(text)
    rest = _UH_HUH.sub(" ", " ".join(words)).split()
    return bool(words) and all(_M_HUM.fullmatch(w) for w in rest) and (not rest or "m" in "".join(rest))


def burst_words(before: str, now: str) -> str:
    """What the transcript says of a burst: `now`, less `before` (the transcript when the burst began,
    still the last turn's until the Listener hears the burst; it may also grow by the burst)."""
    if now == before or not now.strip():
        return ""
    return now[len(before):] if before and now.startswith(before) else now


def shows_other_words(words: str) -> bool:
    """The burst's transcript holds a word that is no backchannel."""
    return bool(words_of(words)) and not is_backchannel(words)


def opens_interruption(words: str) -> bool:
    """The burst's transcript holds a word (or two: "hold on") that opens an interruption."""
    ws = words_of(words)
    return any(tuple(ws[i: i + n]) in OPENERS for i in range(len(ws)) for n in (1, 2))


@dataclass(frozen=True)
class Decision:
    action: str  # PAUSE, RESUME or DROP
    reason: str  # "talked over", "continued", "hum", "backchannel", "long", "words", "late words", "model"
    words: str  # the burst's words as the transcript shows them ("" when it shows none)
    speech_s: float  # the burst so far: from its first speech frame to its latest

    @property
    def by_words(self) -> bool:
        """The user's words decided it (a drop on words the transcript showed), not their speech's length."""
        return self.reason in ("words", "late words")


class BargeInJudge:
    """Per-frame barge-in decisions for one voice: feed `step` every frame, apply what it returns.

    Phases: idle (counting the user's consecutive speech frames), over (a burst over the voice, which
    talks on while it is shorter than a backchannel), paused (a burst being judged, the voice silent)
    and watching (talked through or resumed, its late transcript may still drop it)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget any burst: the voice was cleared or a new turn began elsewhere."""
        self.phase = "idle"
        self.run = 0  # consecutive frames of user speech
        self.quiet = 0  # consecutive frames without
        self.spoken = 0  # frames of the burst being judged, from its first speech frame to its latest
        self.watch = 0  # frames left in which a resumed burst's transcript may still drop the reply
        self.before = ""  # the transcript when the burst began
        self.heard_backchannel = False  # the burst's transcript shows backchannel words only
        self.dropped = False  # this burst dropped the reply: nothing more to decide until the user stops
        self.was_paused = False  # the voice paused for the burst being watched (else it was talked through)

    @property
    def holding(self) -> bool:
        """A burst over the voice is under way, or the voice is paused for one, or was resumed and the
        burst is still being watched."""
        return self.phase != "idle"

    def new_reply(self) -> None:
        """A reply begins: count only the user's speech from here on (the voice activity of the turn it
        answers lags a frame or two, and would otherwise pause its first word)."""
        if self.phase == "idle":
            self.run = 0

    def step(self, speaking: bool, transcript: str, talking: bool) -> Decision | None:
        """One frame. `speaking`: the user speaks in it; `transcript`: the user's turn as the
        Listener hears it now; `talking`: the voice has something to say (playing, paused, or
        being synthesized). Returns what to do with the voice, or None."""
        gap = self.quiet  # quiet frames inside a burst count as part of it once the user speaks on
        self.run = self.run + 1 if speaking else 0
        self.quiet = 0 if speaking else self.quiet + 1
        if self.phase == "idle":
            if self.run <= 1:
                self.dropped = False
                self.before = transcript
            if self.run < BARGE_IN_FRAMES or not talking or self.dropped:
                return None
            self.phase, self.spoken, gap = "over", self.run - 1, 0  # counted on from this frame
        if self.phase == "over":  # talked over, the voice talking on: too short yet to be more than a nod
            if not talking:
                self.reset()
                return None
            if speaking:
                self.spoken += 1 + gap
            elif self.quiet >= END_QUIET_FRAMES:  # over before it outlasted a backchannel: talked through
                self.phase, self.watch = "watching", LATE_WORDS_FRAMES
                return None
            words = burst_words(self.before, transcript)
            if opens_interruption(words):
                return self._drop("words", words)
            if self.spoken < PAUSE_FRAMES:
                return None
            if is_backchannel(words):  # "Yeah" said at length: talked through, watched like a resumed burst
                self.phase, self.watch, self.heard_backchannel = "watching", LATE_WORDS_FRAMES, True
                return None
            self.phase = "paused"
            return self._decide(PAUSE, "talked over", words)
        if not talking:  # the voice was dropped, or ended: nothing left to judge
            self.reset()
            return None
        words = burst_words(self.before, transcript)
        self.heard_backchannel = is_backchannel(words)
        if self.phase == "watching":
            if speaking:
                self.spoken = self.spoken + 1 + gap if gap < END_QUIET_FRAMES else 1
            if self.takes_turn(words):
                return self._drop("late words", words)
            if speaking and self.heard_backchannel:  # a backchannel still being said: talk on through it
                self.watch = LATE_WORDS_FRAMES
                return self._drop("long", words) if self.spoken > MAX_TALKED_OVER_FRAMES else None
            if speaking and not self.was_paused and self.spoken == 1:  # a new burst after one talked through
                self.phase = "over"
                return None
            if speaking:  # the user goes on: pause at once
                self.phase = "paused"
                return self._decide(PAUSE, "continued", words)
            self.watch -= 1
            if self.watch <= 0:
                self.reset()
            return None
        if speaking:
            self.spoken += 1 + gap
        if self.takes_turn(words):
            return self._drop("words", words)
        if self.spoken > MAX_TALKED_OVER_FRAMES:
            return self._drop("long", words)
        if is_hum(words):
            return self._resume("hum", words)
        if self.quiet < END_QUIET_FRAMES:
            return None
        if self.heard_backchannel:
            return self._resume("backchannel", words)
        if words_of(words):  # other words, of a burst too short for them to decide (`takes_turn`)
            return self._resume("short", words)
        if self.quiet >= (END_QUIET_FRAMES if self.spoken <= MAX_BACKCHANNEL_FRAMES else AWAIT_WORDS_FRAMES):
            return self._resume("no words", words)
        return None

    def takes_turn(self, words: str) -> bool:
        """The burst's words take the turn: they open an interruption, or they are no backchannel and the
        burst has lasted longer than WORDS_DECIDE_FRAMES (a shorter one's words may be Whisper's guess)."""
        return opens_interruption(words) or (shows_other_words(words) and self.spoken > WORDS_DECIDE_FRAMES)

    def keeps_reply(self, transcript: str) -> bool:
        """A burst over the voice is being judged or watched and what the transcript shows of it does not
        take the turn: the back-end starts nothing on it (its words are a backchannel's, or a guess)."""
        return self.phase != "idle" and not self.takes_turn(burst_words(self.before, transcript))

    def model_yields(self) -> Decision | None:
        """The front-end model itself chose to yield (a compact checkpoint trained with
        interruptions says END while the user talks over it): drop now, when a burst longer than
        MODEL_YIELD_FRAMES is being judged or watched and its transcript has not shown a
        backchannel. The model hears the user's voice activity, not the words: sooner, its END is a
        guess the transcript decides better (measured: it dropped "Okay", "Oh, wow" and "Yeah, yeah"
        at 0.3-0.72 s of speech, docs/BENCHMARKS.md)."""
        if self.phase == "idle" or self.heard_backchannel or self.spoken <= MODEL_YIELD_FRAMES:
            return None
        return self._drop("model", "")

    def _resume(self, reason: str, words: str) -> Decision:
        self.phase, self.watch = "watching", LATE_WORDS_FRAMES
        return self._decide(RESUME, reason, words)

    def _drop(self, reason: str, words: str) -> Decision:
        d = self._decide(DROP, reason, words)
        run = self.run
        self.reset()
        self.run, self.dropped = run, True  # the user may still be speaking: the same burst
        return d

    def _decide(self, action: str, reason: str, words: str) -> Decision:
        self.was_paused |= action == PAUSE
        return Decision(action, reason, words.strip(), round(self.spoken * FRAME_S, 3))
