"""`tandem fdb-devset --out DIR`: the project's full-duplex dev set, spoken and laid out as Full-Duplex-Bench v1.

The texts are fdb_dev.json (written for this project); each item is spoken by one of the test voices at
one of a few speeds, in turn, so every task hears several voices and speeds. Times in the task files are
measured on the rendered track (the speech's first and last loud samples), at FDB's 16 kHz:

- pause: a sentence split where it is not complete, a pause of 0.8-2.5 s, the rest, then almost nothing
  (FDB judges every word of the output, so what follows the sentence is not room for a reply);
- turn: a question (or a remark) and 6 s for the reply; the turn's end in turn_taking.json;
- interruption: a request for a long reply, and 2.5-3.5 s after it (the reply under way) a new question;
  its span in interrupt.json, with the context and the new question's accepted answers;
- backchannel: a story of five sentences with the pauses where a listener says "mm-hm" (0.5-1.2 s);
- user_backchannel (not FDB v1; after v1.5's user backchannel): a question, and 2.5 s after it, while the
  reply is under way, the user's "mm-hm": the assistant should talk on.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..audio.frames import SAMPLE_RATE, resample, write_mono
from ..audio.voices import VOICES, speak
from ..runtime.errors import TandemError

SPEC = Path(__file__).with_name("fdb_dev.json")
RATE = 16000  # FDB's inputs
SPEEDS = (1.0, 0.9, 1.15)
LOUD = 0.02  # a sample this loud is speech (the test voices are normalised to 0.8 peak)
FOLDERS = {"pause": "synthetic_pause_handling", "turn": "synthetic_turn_taking",
           "interruption": "synthetic_user_interruption", "backchannel": "synthetic_backchannel",
           "user_backchannel": "synthetic_user_backchannel"}


def voice_of(k: int) -> tuple[str, float]:
    """Item k's voice and speed: the voices in turn, the speed changing every pass over them."""
    voices = list(VOICES)
    return voices[k % len(voices)], SPEEDS[(k // len(voices)) % len(SPEEDS)]


def _spoken(text: str, voice: str, speed: float) -> np.ndarray:
    """`text` at 16 kHz, cut to its speech (first to last loud sample)."""
    x = resample(speak(text, voice, lead_s=0.0, tail_s=0.0, speed=speed), SAMPLE_RATE, RATE)
    loud = np.flatnonzero(np.abs(x) > LOUD)
    if not len(loud):
        raise TandemError(f"the test voice {voice} spoke {text!r} as silence")
    return x[loud[0]: loud[-1] + 1]


class Track:
    """A user track built left to right: speech, then silence, each placed after the last."""

    def __init__(self, voice: str, speed: float, lead_s: float = 0.5) -> None:
        self.voice, self.speed = voice, speed
        self.parts: list[np.ndarray] = [np.zeros(int(lead_s * RATE), np.float32)]

    @property
    def t(self) -> float:
        return sum(len(p) for p in self.parts) / RATE

    def say(self, text: str) -> tuple[float, float]:
        start = self.t
        self.parts.append(_spoken(text, self.voice, self.speed))
        return round(start, 3), round(self.t, 3)

    def wait(self, s: float) -> None:
        self.parts.append(np.zeros(int(round(s * RATE)), np.float32))

    def audio(self) -> np.ndarray:
        return np.concatenate(self.parts)


def _item(task: str, k: int, entry: list[Any]) -> tuple[np.ndarray, str | None, list[dict[str, Any]], dict[str, Any]]:
    """(track, the task file's name, its content, what the item is) for entry k of a task."""
    voice, speed = voice_of(k + 7 * list(FOLDERS).index(task))
    tr = Track(voice, speed)
    about: dict[str, Any] = {"voice": voice, "speed": speed}
    if task == "pause":
        first, rest = entry
        pause = round(0.8 + (k * 0.61) % 1.7, 2)  # 0.8-2.5 s, spread over the items
        _, a = tr.say(first)
        tr.wait(pause)
        b, _ = tr.say(rest)
        tr.wait(0.3)
        return tr.audio(), "pause.json", [{"text": "[PAUSE]", "timestamp": [a, b]}], {**about, "text": f"{first} ... {rest}"}
    if task == "turn":
        text, answers = entry
        _, end = tr.say(text)
        tr.wait(6.0)
        return tr.audio(), "turn_taking.json", [{"text": "[TURN-TAKING]", "timestamp": [end, end], "answers": answers}], \
            {**about, "text": text}
    if task == "interruption":
        context, interrupt, answers = entry
        tr.say(context)
        tr.wait(2.5 + 0.5 * (k % 3))
        span = tr.say(interrupt)
        tr.wait(8.0)
        return tr.audio(), "interrupt.json", [{"context": context, "interrupt": interrupt, "timestamp": list(span),
                                               "answers": answers}], {**about, "text": f"{context} / {interrupt}"}
    if task == "backchannel":
        for i, sentence in enumerate(entry):
            if i:
                tr.wait(round(0.5 + ((k + i) * 0.37) % 0.7, 2))
            tr.say(sentence)
        tr.wait(0.3)
        return tr.audio(), None, [], {**about, "text": " ".join(entry)}
    if task == "user_backchannel":
        question, bc = entry
        tr.say(question)
        tr.wait(2.5)
        span = tr.say(bc)
        tr.wait(5.0)
        return tr.audio(), "user_backchannel.json", [{"context": question, "backchannel": bc, "timestamp": list(span)}], \
            {**about, "text": f"{question} / {bc}"}
    raise TandemError(f"unknown dev-set task {task!r}")


def write_devset(out: Path, spec: Path = SPEC, tasks: list[str] | None = None) -> dict[str, int]:
    """Every item of `spec` under `out` in FDB's layout; returns the items per task folder."""
    data = json.loads(spec.read_text())
    counts: dict[str, int] = {}
    index = []
    for task, folder in FOLDERS.items():
        if tasks and task not in tasks:
            continue
        for k, entry in enumerate(data.get(task, [])):
            audio, name, event, about = _item(task, k, entry)
            item = out / folder / str(k + 1)  # FDB's backchannel script takes only numeric ids
            item.mkdir(parents=True, exist_ok=True)
            write_mono(item / "input.wav", audio, RATE)
            if name:
                (item / name).write_text(json.dumps(event, indent=1))
            index.append({"task": task, "path": f"{folder}/{k + 1}", **about, "duration_s": round(len(audio) / RATE, 2)})
            counts[folder] = counts.get(folder, 0) + 1
    (out / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in index))
    return counts


def run_devset(args: argparse.Namespace) -> int:
    counts = write_devset(Path(args.out), tasks=args.tasks)
    for folder, n in counts.items():
        print(f"{folder}: {n} items")
    print(f"written to {args.out}; run `tandem bench --fdb {args.out} --modes tandem,cascade --out DIR`")
    return 0
