"""Training shards for the moshi front-end: two-channel dialogues -> Mimi codes + text + oracle columns.

A dialogue is two 24 kHz channels (user, assistant) with word timestamps on each. Synthetic ones
come from `tandem.train.synth` (the generator every recipe shares, rendered to audio here); real
ones from a JSONL manifest (`read_manifest`). Each becomes one example in Moshi's training layout,
a [1 + 2K, T] code array (text, K assistant codebooks, K user codebooks) plus a [T] oracle array.

Column alignment is what `LMGen.step` does at run time (REFERENCE 5): column c holds the assistant's
text token and audio codes of frame c, and the user codes of frame c + 1 (the model hears user
frame k at step k, together with its own output of step k - 1). Oracle columns come from the shared
simulator (`tandem.train.oracles`) with KAME's recipe. Text tokens start at the frame their word
starts (plus text_delay); PAD (3) elsewhere, and end-of-padding (0) on the PAD just before a word,
as in Moshi.
"""
from __future__ import annotations

import json
import math
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from ...audio.frames import SAMPLE_RATE
from ..oracles import FPS, KAME, OracleRecipe, dialogue_oracles
from ..synth import Dialogue, Turn, Word, make_dialogue, reply_duration

FRAME = 1920


@dataclass
class TwoChannelDialogue:
    user: np.ndarray
    assistant: np.ndarray
    user_words: list[Word]
    assistant_words: list[Word]
    turns: list[Turn]  # user turns with the true replies, for the simulated oracles
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_frames(self) -> int:
        return int(math.ceil(max(len(self.user), len(self.assistant)) / FRAME))


class Renderer(Protocol):
    def render(self, text: str, duration: float, who: str) -> np.ndarray:
        """Audio (24 kHz) for a word or phrase, at most `duration` seconds long."""
        ...


class ToneRenderer:
    """A cheap stand-in voice for tests and dry runs: each word a harmonic tone whose pitch is a
    hash of the word, the user lower than the assistant. Enough for codes that depend on the words."""

    def render(self, text: str, duration: float, who: str) -> np.ndarray:
        n = max(1, int(duration * SAMPLE_RATE))
        f0 = (110 if who == "user" else 190) * (1 + (zlib.crc32(text.lower().encode()) % 12) / 12)
        t = np.arange(n) / SAMPLE_RATE
        wave = sum(np.sin(2 * np.pi * f0 * h * t) / h for h in (1, 2, 3))
        env = np.minimum(1, np.minimum(t, t[::-1]) / 0.02)
        return (0.2 * wave * env).astype(np.float32)


class VoiceRenderer:
    """Real voices: a Debian test voice for the user (tandem.audio.voices) and the assistant's TTS
    (hibari by default). Each word is rendered alone and fitted into its slot, which keeps the word
    timestamps exact at the cost of prosody; good enough for the codec-level stream alignment."""

    def __init__(self, user_voice: str = "flite", assistant_tts: Any = None) -> None:
        self.user_voice = user_voice
        self.tts = assistant_tts
        self._cache: dict[tuple[str, str], np.ndarray] = {}

    def render(self, text: str, duration: float, who: str) -> np.ndarray:
        key = (who, text.lower().strip("?.,!"))
        if key not in self._cache:
            if who == "user":
                from ...audio.voices import speak

                self._cache[key] = speak(key[1], self.user_voice, lead_s=0.0, tail_s=0.0)
            else:
                if self.tts is None:
                    from ...speak.tts import HibariTTS

                    self.tts = HibariTTS()
                from ...speak.tts import trim_leading_silence

                self._cache[key] = trim_leading_silence(self.tts.synthesize(key[1]))
        audio = self._cache[key]
        n = int(duration * SAMPLE_RATE)
        return audio[:n] if len(audio) > n else audio


def _place(track: np.ndarray, audio: np.ndarray, t: float) -> None:
    i = int(t * SAMPLE_RATE)
    j = min(len(track), i + len(audio))
    if j > i:
        track[i:j] += audio[: j - i]


def assistant_words(turn: Turn, start: float, rng: random.Random) -> list[Word]:
    """The reply's words timed at the assistant voice's pace (about 0.068 s per character)."""
    words, t = [], start
    per_char = (reply_duration(turn.reply) - 0.3) / max(1, len(turn.reply))
    for w in turn.reply.split():
        dur = max(0.12, (len(w) + 1) * per_char * rng.uniform(0.9, 1.1))
        words.append(Word(w, t, t + dur))
        t += dur
    return words


def render_synthetic(d: Dialogue, renderer: Renderer, rng: random.Random) -> TwoChannelDialogue:
    """The assistant answers each turn 0.2-0.6 s after it ends (the true reply); both channels rendered."""
    a_words: list[Word] = []
    for turn in d.turns:
        a_words += assistant_words(turn, turn.end + rng.uniform(0.2, 0.6), rng)
    u_words = [w for t in d.turns for w in t.words]
    dur = max(d.duration, max(w.end for w in a_words + u_words) + 0.5)
    n = int(math.ceil(dur * FPS)) * FRAME
    user, assistant = np.zeros(n, np.float32), np.zeros(n, np.float32)
    for w in u_words:
        _place(user, renderer.render(w.text, w.end - w.start, "user"), w.start)
    for w in a_words:
        _place(assistant, renderer.render(w.text, w.end - w.start, "assistant"), w.start)
    return TwoChannelDialogue(user, assistant, u_words, a_words, list(d.turns), {"source": "synthetic"})


def text_columns(words: list[Word], n: int, encode: Callable[[str], list[int]], pad_id: int = 3,
                 end_pad_id: int = 0, text_delay: int = 0) -> np.ndarray:
    out = np.full(n, pad_id, np.int64)
    cursor = 0
    for w in words:
        c = max(cursor, int(w.start * FPS) + text_delay)
        ids = encode(" " + w.text if cursor else w.text)
        if c >= n:
            break
        if c > 0 and out[c - 1] == pad_id:
            out[c - 1] = end_pad_id
        for k, tok in enumerate(ids):
            if c + k < n:
                out[c + k] = tok
        cursor = c + len(ids)
    return out


def encode_channel(mimi: Any, audio: np.ndarray, n_frames: int, n_q: int) -> np.ndarray:
    """[n_q, n_frames] Mimi codes of a whole channel (not streaming: one call per channel)."""
    import torch

    x = np.zeros(n_frames * FRAME, np.float32)
    x[: min(len(audio), len(x))] = audio[: len(x)]
    dev = next(mimi.parameters()).device
    with torch.no_grad():
        codes = mimi.encode(torch.from_numpy(x)[None, None].to(dev))[0, :n_q]
    return codes[:, :n_frames].cpu().numpy().astype(np.int64)


def build_moshi_example(d: TwoChannelDialogue, mimi: Any, tokenizer: Any, n_q: int, rng: random.Random,
                        recipe: OracleRecipe = KAME) -> dict[str, np.ndarray]:
    """codes [1 + 2 n_q, T] (text, assistant, user shifted by one frame) and oracle [T]."""
    n = d.n_frames
    text = text_columns(d.assistant_words, n, tokenizer.encode, tokenizer.pad_id, tokenizer.end_pad_id,
                        recipe.text_delay)
    a = encode_channel(mimi, d.assistant, n, n_q)
    u = encode_channel(mimi, d.user, n + 1, n_q)[:, 1:]  # column c <- user frame c + 1 (LMGen's alignment)
    oracle, _ = dialogue_oracles(rng, d.turns, n, tokenizer.encode, tokenizer.start_id, tokenizer.pad_id, recipe)
    return {"codes": np.concatenate([text[None], a, u]).astype(np.int32), "oracle": oracle.astype(np.int32)}


def write_shards(out_dir: str | Path, examples: Iterator[dict[str, np.ndarray]], per_shard: int = 64,
                 meta: dict[str, Any] | None = None) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths, buf, total = [], [], 0

    def flush() -> None:
        nonlocal buf
        if buf:
            p = out / f"shard-{len(paths):05d}.npz"
            np.savez_compressed(p, **{f"{k}_{i}": v for i, ex in enumerate(buf) for k, v in ex.items()})
            paths.append(p)
            buf = []

    for ex in examples:
        buf.append(ex)
        total += 1
        if len(buf) >= per_shard:
            flush()
    flush()
    (out / "shards.json").write_text(json.dumps({"examples": total, "shards": [p.name for p in paths],
                                                 **(meta or {})}, indent=1))
    return paths


def read_shards(data_dir: str | Path) -> list[dict[str, np.ndarray]]:
    d = Path(data_dir)
    index = d / "shards.json"
    if not index.exists():
        raise FileNotFoundError(f"{d} has no shards.json; make shards with `tandem train moshi --synthesize N`")
    out = []
    for name in json.loads(index.read_text())["shards"]:
        with np.load(d / name) as z:
            n = len([k for k in z.files if k.startswith("codes_")])
            out += [{"codes": z[f"codes_{i}"].astype(np.int64), "oracle": z[f"oracle_{i}"].astype(np.int64)}
                    for i in range(n)]
    return out


def read_manifest(path: str | Path) -> Iterator[TwoChannelDialogue]:
    """Real two-channel dialogues: one JSON object per line,
    {"audio": "x.wav" (stereo, any rate), "user_channel": 0,
     "user_words": [[word, start, end], ...], "assistant_words": [[word, start, end], ...]}.
    User turns (and the replies the oracles should carry) are the stretches of user words between
    assistant speech; a turn's reply is what the assistant says until the user speaks again."""
    import soundfile as sf
    import soxr

    base = Path(path).parent
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        ch = int(rec.get("user_channel", 0))
        audio, sr = sf.read(str(base / rec["audio"]), dtype="float32", always_2d=True)
        if audio.shape[1] != 2:
            raise ValueError(f"{rec['audio']}: a two-channel dialogue needs a stereo file, got {audio.shape[1]} channels")
        if sr != SAMPLE_RATE:
            audio = soxr.resample(audio, sr, SAMPLE_RATE).astype(np.float32)
        uw = [Word(w, float(s), float(e)) for w, s, e in rec["user_words"]]
        aw = [Word(w, float(s), float(e)) for w, s, e in rec["assistant_words"]]
        yield TwoChannelDialogue(audio[:, ch].copy(), audio[:, 1 - ch].copy(), uw, aw, turns_from_words(uw, aw),
                                 {"source": str(rec["audio"])})


def turns_from_words(user: list[Word], assistant: list[Word]) -> list[Turn]:
    groups: list[list[Word]] = []
    for w in user:
        if groups and not any(groups[-1][-1].end <= a.start < w.start for a in assistant):
            groups[-1].append(w)
        else:
            groups.append([w])
    turns = []
    for i, g in enumerate(groups):
        until = groups[i + 1][0].start if i + 1 < len(groups) else math.inf
        reply = " ".join(a.text for a in assistant if g[-1].end <= a.start < until)
        turns.append(Turn(g, " ".join(w.text for w in g), reply, "unknown"))
    return turns


def synthetic_dialogues(n: int, seed: int, renderer: Renderer, heldout: bool = False) -> Iterator[TwoChannelDialogue]:
    rng = random.Random(seed)
    for _ in range(n):
        yield render_synthetic(make_dialogue(rng, heldout), renderer, rng)
