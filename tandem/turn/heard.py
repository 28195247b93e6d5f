"""What the user heard of the assistant's voiced pieces: a piece cut part-way (barge-in) was recorded as said
when its audio started, and only its words that were heard may stay in the conversation."""
from __future__ import annotations

from typing import Any

from ..record import timeline as tl
from .conversation import Conversation


class HeardPieces:
    """Keeps the conversation to what was heard, frame by frame, from the voice's cuts and pauses."""

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self._held: tuple[str, str] | None = None  # while the voice is paused: (the piece playing, its words unsaid)

    def update(self, voicer: Any, timeline: tl.Timeline, t: float) -> None:
        """A voiced piece cut part-way (barge-in) was recorded as said when its audio started: keep
        only its words that were heard, so the next prompt does not tell the LLM it said the rest.
        A pause (the user talks over the voice) counts as a cut until the voice resumes: whether it
        was an interruption may be known only after a prompt has been built from the user's words."""
        if voicer is None or not hasattr(voicer, "take_cuts"):
            return
        if voicer.paused and self._held is None:
            held = voicer.playing()
            self._held = (held.text, self.conv.unsay(held.text, held.heard)) if held else ("", "")
        for cut in voicer.take_cuts():
            if self._held is not None and self._held[0] == cut.text:
                unsaid, self._held = self._held[1], None  # unsaid when it paused, where it is cut
            else:
                unsaid = self.conv.unsay(cut.text, cut.heard)
            timeline.add(tl.ASSISTANT_CUT, t=t, text=cut.text, heard=round(cut.heard, 3), unsaid=unsaid)
        if self._held is not None and not voicer.paused:
            if voicer.busy and self._held[1]:  # resumed: the rest of the piece is being said after all
                self.conv.on_assistant(self._held[1])
            self._held = None
