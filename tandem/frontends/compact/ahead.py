"""The voice reads ahead of the compact front-end's model, within a clause it has begun to copy.

Once the model copies an oracle word, the words after it in the oracle, as far as the end of their
clause, go to the voice as soon as each is fed whole, and the model's own copies of them are not voiced
again (`voice_ahead`, called by `decoding.step` after each decision; the Mouth voices what it returns).
The model paces its words like speech (a word, then PADs for as long as it takes to say), which a voice
that says a word in 0.2 s ran ahead of: "It" / "is" / "Oslo." reached the voice five frames apart, each
its own synthesis of one word (said faster: tts.segment_speed), and a listener heard "It is as low".
The model still decides where a reply starts and which words it copies; within a clause it has begun
to read, it gives up the pace.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import takewhile
from typing import TYPE_CHECKING, Callable, Protocol

import torch

from .tokenizer import END, PAD, START

if TYPE_CHECKING:
    from .tokenizer import CompactTokenizer


class ReadingState(Protocol):
    """What reading ahead needs of a session's decoding state (decoding.py's CompactState, which
    implements it): the word and clause tests, the word cursor, and the voice run it keeps."""

    starts_word: Callable[[int], bool] | None
    ends_clause: Callable[[int], bool] | None
    cursor: int | None
    voiced: bool
    run: "VoiceRun | None"
    ahead_words: int


CLAUSE_ENDS = ".,;:?!"  # a word ending in one of these ends what the voice reads ahead
LONGEST_AHEAD = 48  # oracle frames the voice looks ahead of the last piece it was handed
COPIED_WEIGHT = 0.25  # the pointer's weight on a frame for a piece to count as copied from it (decoding's cursor too)


def clause_ends(tokenizer: "CompactTokenizer") -> Callable[[int], bool]:
    """Whether a piece ends a clause ("Oslo" + "."), for `voice_ahead`."""
    ends = frozenset(i for i in range(END + 1, tokenizer.vocab_size)
                     if tokenizer.piece(i).rstrip().endswith(tuple(CLAUSE_ENDS)))
    return ends.__contains__


def fed_token(cache: dict[str, torch.Tensor], r: int, frame: int) -> int | None:
    """The oracle token row `r` was fed at `frame`, or None when that frame has not been fed (yet)."""
    hit = torch.nonzero(cache["slot_pos"][r] == frame)
    return int(cache["oracle"][r, int(hit[0, 0])]) if len(hit) else None


@dataclass
class VoiceRun:
    """Oracle pieces handed to the voice ahead of the model (`voice_ahead`)."""
    start: int  # the oracle frame of the piece the model copied, which began the run
    end: int  # the oracle frame of the last piece handed (or said by the model) so far
    expect: deque[tuple[int, int]] = field(default_factory=deque)  # (frame, piece) handed, not yet said by the model
    closed: bool = False  # the words handed reached the end of a clause (or of the oracle)


def _word_at(cache: dict[str, torch.Tensor], r: int, frame: int, st: ReadingState, vocab: int) -> list[int]:
    """The pieces of the oracle word that begins at `frame`, as far as they are fed."""
    word = [fed_token(cache, r, frame)]
    for f in range(frame + 1, frame + LONGEST_AHEAD):
        t = fed_token(cache, r, f)
        if t is None or not (END < t < vocab) or st.starts_word(t):
            break
        word.append(t)
    return word


def _reads_on(cache: dict[str, torch.Tensor], r: int, st: ReadingState, run: VoiceRun, tok: int, vocab: int) -> bool:
    """Does the model's `tok` say the next of the pieces handed ahead (`run.expect`, popped through it)?
    Within a word, the next piece; a word start may leave out handed words, and must be the same word:
    from the same frame, or (copied from a newer oracle) with the same pieces, or, not copied at all, the
    very next word handed. "Austr" from "Australia" does not say the "Austr" of "Austria" handed from
    the oracle before."""
    if not run.expect:
        return False
    if not st.starts_word(tok):
        if run.expect[0][1] != tok:
            return False
        run.expect.popleft()
        return True
    expect = list(run.expect)
    src = copied_from(cache, r, tok)
    for i, (frame, piece) in enumerate(expect):
        if piece != tok:
            continue
        handed = [piece] + [p for _, p in takewhile(lambda fp: not st.starts_word(fp[1]), expect[i + 1:])]
        if src == frame or (src is None and i == 0) or (src is not None and _word_at(cache, r, src, st, vocab) == handed):
            for _ in range(i + 1):
                run.expect.popleft()
            return True
    return False


def copied_from(cache: dict[str, torch.Tensor], r: int, tok: int) -> int | None:
    """The oracle frame this step's pointer copied `tok` from (the frame holding it that the pointer
    weighed most, at least COPIED_WEIGHT), or None: the model made the piece up. The next step works
    out the same for its `prev`; this is it a frame sooner."""
    if tok <= END or "attn" not in cache:
        return None
    match = cache["attn"][r] * (cache["oracle"][r] == tok)
    best = int(match.argmax())
    return int(cache["slot_pos"][r, best]) if float(match[best]) >= COPIED_WEIGHT else None


def voice_ahead(cache: dict[str, torch.Tensor], r: int, st: ReadingState, tok: int, vocab: int,
                settled: bool = True, upcoming: tuple[int, ...] | None = None) -> list[int] | None:
    """The oracle pieces the voice may say now, after this frame's token `tok`, ahead of the model: once
    the model copies an oracle word (its source frame: the word cursor's, else the pointer's), the rest
    of that word and the whole words after it up to the end of their clause (`st.ends_clause`; without
    it, the rest of the word only), each as soon as it is fed whole (the piece after it is fed too). PAD
    frames between words (the feed waiting for the LLM) are passed over; a new oracle (START), which
    cuts the old one where it was, ends the run, and so does a word's tail fed without its head (KAME's
    feed drops the pieces whose frame has passed when they arrive). The model's later tokens among the
    pieces handed are marked `st.voiced` (not voiced again); any other token ends the run, and a copied
    one starts another. A run in an oracle older than the
    newest START reads no further (the pointer may take "is" from the oracle before, whose next word was
    an answer since replaced).

    Whole words are read ahead only once the oracle is `settled` (it answers the turn's final
    transcript): an oracle from a partial is often replaced a few frames later, and the model, at its
    own pace, had not yet said the words it replaced ("It is London." read ahead, then "Edinburgh.").
    `upcoming`: the settled oracle's tokens for the frames after this one (OracleStream.upcoming): the
    voice reads them too, so an answer the LLM has given is said without waiting for the feed of one
    token a frame to reach it ("The capital of Australia is" took 8 frames to feed before "Canberra.").
    The session appends whole words, so the end of what is known ends a word."""
    st.voiced = False
    if st.starts_word is None or tok == END:
        st.run = None
        return None
    run = st.run
    if tok > END:
        if run is not None and _reads_on(cache, r, st, run, tok, vocab):
            st.voiced = True
        else:
            src = st.cursor if st.cursor is not None else (
                copied_from(cache, r, tok) if st.ends_clause is not None else None)
            st.run = run = VoiceRun(src, src) if src is not None else None
    if run is not None and "reset_pos" in cache and int(cache["reset_pos"][r]) > run.start:
        run.closed = True  # a newer oracle began since: what the old one held after the run is not said ahead
    if run is None or run.closed:
        return None
    out: list[tuple[int, int]] = []  # (frame, piece) of the whole words found
    word: list[tuple[int, int]] = []
    now = int(cache["pos"][r]) - 1 if "pos" in cache else None  # the frame just stepped
    last = fed_token(cache, r, run.end)
    for frame in range(run.end + 1, run.end + 1 + LONGEST_AHEAD):
        t = fed_token(cache, r, frame)
        if t is None and now is not None and upcoming is not None and frame > now:
            i = frame - now - 1
            t = upcoming[i] if i < len(upcoming) else PAD  # all the oracle holds: its last word is whole
        if t is None:
            break  # not fed yet: the word under way may go on
        if t == START:  # a new oracle cuts the old one where it was, maybe inside a word
            run.closed = True
            break
        if END < t < vocab and not st.starts_word(t):
            if not word and frame > run.end + 1:  # a word's tail after a gap: its head came too late to be fed
                run.closed = True
                break
            word.append((frame, t))
            continue
        out += word  # a word start or PAD after it: the word under way is whole
        if word:
            run.end, last = word[-1]
        word = []
        if st.ends_clause is None or (last is not None and st.ends_clause(last)):
            run.closed = True
            break
        if END < t < vocab:
            ahead = sum(st.starts_word(p) for _, p in run.expect) + sum(st.starts_word(p) for _, p in out)
            if ahead >= (st.ahead_words if settled else 0):
                break  # far enough ahead of the model: the next word waits for it to read on
            word = [(frame, t)]
        elif upcoming is not None and now is not None and frame > now + len(upcoming):
            break  # past all the oracle holds
    run.expect.extend(out)
    return [p for _, p in out] or None
