"""When the compact front-end takes its turn: the chance that a sampled model would have started, and the waits.

Greedy decoding, except for the moment a reply starts. Greedy decoding speaks only in a frame where
speaking is the single most likely outcome, so a model that spreads its wish to reply over several
frames (0.39, then 0.05, 0.12, 0.16...) after the user stops may never reply at all, although a
model sampled frame by frame would almost surely have started. `TurnStart` keeps, from the moment
the user's voice stops, the chance that the model would have started by now,
1 - prod(1 - p_speak), and starts the reply (the most likely word) once that reaches one half: the
median of the sampled start time, decided without randomness. It is armed by the user's speech and
disarmed by the model's first word, so it never restarts a reply the model ended, and it is reset
whenever the user speaks again, so pauses inside a turn start from zero.
"""
from __future__ import annotations

from typing import Callable

import torch

from ...speak.frontend import speaking
from .tokenizer import END

START_CHANCE = 0.5  # start the reply once the chance of having started since the user stopped reaches this
# with an answer fed by the oracle stream since the last reply, a turn still not taken this many quiet
# frames after the user's voice stopped is taken: a safety net for the model that lets the moment pass
# (a question of the dev dialogues got no reply at all, its oracle "A spider has 8 legs." waiting)
MAX_TURN_WAIT_FRAMES = 12  # 0.96 s: longer than most pauses inside a turn; the model itself starts 2-3 frames after
# with the oracle settled (it answers the turn's final transcript: the Listener has ended the turn and the
# answer is there), the turn is taken this many quiet frames after the voice stopped. The model's own moment
# comes 2-3 frames after on most turns, but on some utterances (a question ending in a long voiced "have?")
# it let 0.6 s pass with the answer ready, alone and under load; the cascade speaks once it has the final
# and its answer, and the tandem reply should not come later than that
SETTLED_TURN_WAIT_FRAMES = 3
# with the settled answer's words also read as the end of the user's message (the turn-end judge's chance over
# reading.SURE_END: every dev question, few pause fragments), the turn is taken at the first quiet frame: the
# frames above wait for that reading, not for the model
ENDED_TURN_WAIT_FRAMES = 1
# with the user's words stopped inside a clause (the machine's USER_UNFINISHED state) the floor is theirs for
# this many quiet frames: longer than the pauses people make inside a sentence (FDB's synthetic ones), then
# the turn is the assistant's all the same (a question that really ends "...made of")
MAX_UNFINISHED_WAIT_FRAMES = 36  # 2.9 s
# whole words the turn-end judge reads as going on (the machine's USER_MAY_GO_ON): a listener's pause, counted
# from the voice's stop. Longer than most pauses between a story's sentences (0.5-1.2 s), short enough that a
# whole message the judge misreads ("Hello, how are you?") is answered within about the cascade's time
MAX_MAY_GO_ON_WAIT_FRAMES = 19  # 1.52 s
# a pause inside a telling (the machine's USER_TELLING) that no reading has ended: longer than the pause's transcript
# and its reading take (0.3-0.5 s), so that a pause is read before the floor is taken; a telling that ends with
# no reading (no sentence's mark, no judge) is answered about a second after the voice stopped
MAX_TELLING_WAIT_FRAMES = 12  # 0.96 s


def turn_due(answer_waiting: bool, quiet: int, settled: bool, ends: bool = False) -> bool:
    """An answer fed since the user began waits, and the model has let the moment pass for long enough:
    MAX_TURN_WAIT_FRAMES, or SETTLED_TURN_WAIT_FRAMES once the oracle answers the final transcript, or
    ENDED_TURN_WAIT_FRAMES once that transcript also reads as the message's end (`ends`)."""
    if not settled:
        return answer_waiting and quiet >= MAX_TURN_WAIT_FRAMES
    return answer_waiting and quiet >= (ENDED_TURN_WAIT_FRAMES if ends else SETTLED_TURN_WAIT_FRAMES)


class TurnStart:
    def __init__(self) -> None:
        self.armed = False  # the user has spoken and the model has not replied since
        self.chance = 0.0  # chance that the model would have started since the voice stopped
        self.quiet = 0  # frames since the voice stopped, while armed
        self.took_opening = False  # this frame's choice overruled the model with the answer's first word

    def reset(self) -> None:
        self.armed = False
        self.chance = 0.0
        self.quiet = 0  # frames since the voice stopped, while armed

    def hold(self, vad_prob: float) -> None:
        """A frame in which the model is kept silent: armed by the user's speech, counting quiet frames."""
        if speaking(vad_prob):
            self.armed, self.chance, self.quiet = True, 0.0, 0
        elif self.armed:
            self.quiet += 1

    def choose(self, logp: torch.Tensor, vad_prob: float, answer_waiting: bool = False, settled: bool = False,
               opening: int | None = None, in_oracle: Callable[[int], bool] | None = None, ends: bool = False) -> int:
        """logp: [V] log-probabilities of this frame's token; returns the token to say. `answer_waiting`:
        the oracle stream has fed an answer since the last reply; `settled`: that answer is the final
        transcript's, `ends`: whose words read as the message's end (`turn_due`); `opening`: the first piece
        the newest oracle stream fed, if any.

        A turn the model takes itself begins with its most likely word. A turn taken for it (`turn_due`)
        begins with `opening`, as the teacher begins by reading the oracle: at such a moment the model's
        most likely word is what it would say least unsure of its turn ("Well,", "A", or "sorry," for a
        new stream after an older one was fed while the user spoke), and a settled turn waits the frame or
        two for the newest stream's first word rather than say one of those.

        A reply begins where the oracle does: a first word the model takes from further on in it
        (`in_oracle`: a word the newest stream fed; given for the reply after one the user dropped)
        becomes `opening`. After the user talked over "It" and the oracle restarted, the model began
        again with "by William Shakespeare.", its place in the reply that was dropped."""
        self.took_opening = False
        tok = int(torch.argmax(logp))
        if speaking(vad_prob):
            self.armed, self.chance, self.quiet = True, 0.0, 0
            return tok
        if tok > END:
            armed = self.armed
            self.reset()
            return self._from_the_start(tok, opening, in_oracle) if armed else tok
        if not self.armed:
            return tok
        p_speak = 1.0 - float(logp[: END + 1].exp().sum())
        self.chance = 1.0 - (1.0 - self.chance) * (1.0 - p_speak)
        self.quiet += 1
        own = self.chance >= START_CHANCE
        if not own and not turn_due(answer_waiting, self.quiet, settled, ends):
            return tok
        if not own and opening is None and self.quiet < MAX_TURN_WAIT_FRAMES:
            return tok  # the newest stream's first word is a frame or two away
        self.reset()
        if not own and opening is not None:
            self.took_opening = True
            return opening
        return self._from_the_start(int(torch.argmax(logp[END + 1:])) + END + 1, opening, in_oracle)

    def _from_the_start(self, tok: int, opening: int | None, in_oracle: Callable[[int], bool] | None) -> int:
        """The first word of a reply: `opening` in place of a later word of the oracle (`choose`)."""
        if opening is not None and tok != opening and in_oracle is not None and in_oracle(tok):
            self.took_opening = True
            return opening
        return tok
