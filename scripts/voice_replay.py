"""When would the answer be heard? Recorded timelines replayed through compact checkpoints with the
real voice (hibari, in-process), offline and deterministic: each frame waits for the voice's syntheses
to finish before the next (hibari takes 10-30 ms for a segment, well inside a frame), so the result
depends on the checkpoint and the Mouth's rules, not on the machine's load. The oracles are the
recorded ones, so a checkpoint is judged on the very inputs a live session gave the last one.

    python scripts/voice_replay.py out/bench/timelines/*.tandem.d0.json \
        --questions ../shared/data/questions-dev.jsonl --checkpoint A.pt --checkpoint B.pt [--out F.json]
    python scripts/voice_replay.py ... --rules default --rules no-repair   # decoding rules side by side
    python scripts/voice_replay.py ... --vad-lag 0 --vad-lag 2   # voice activity from the input audio, 0 or 2 frames late

Per timeline and checkpoint: the time from the end of the user's speech (the VAD's) to the first sound
and to the answer word (placed within its segment in proportion to the characters before it), the
number of segments the voice was handed, and the words said. With `--hear`, the reply's audio is also
heard as the bench hears it (Whisper with the question as context, `scoring.hear`): whether the
answer was heard, and when. The summary gives medians over the
timelines where every checkpoint said the answer.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tandem.audio.frames import FRAME_SAMPLES, SAMPLE_RATE
from tandem.bench.common import load_questions
from tandem.speak.frontend import FrontEndOutput
from tandem.frontends.compact.decoding import DecodeRules
from tandem.frontends.compact.frontend import DEFAULT_CHECKPOINT, CompactFrontEnd
from tandem.frontends.compact.replay import replay
from tandem.bench.scoring import Transcriber, Word, find_answer, hear, listening_context, normalize
from tandem.speak.tts import HibariTTS, phrase_cache, warm_first_words


RULES = {"default": DecodeRules(), "no-repair": DecodeRules(repair=False), "no-word-cursor": DecodeRules(word_cursor=False),
         "no-voice-ahead": DecodeRules(voice_ahead=False), "one-word-ahead": DecodeRules(ahead_words=1),
         "two-words-ahead": DecodeRules(ahead_words=2), "repair-after-ahead": DecodeRules(repair_first=False)}


def voice_replay(tl: dict, fe: CompactFrontEnd, vad_lag: int | None = None) -> tuple[np.ndarray, list[tuple[int, str]], float | None]:
    """(audio, [(sample where a segment starts, its text)], the VAD's end of speech in seconds)."""
    audio, starts = [], []

    def heard(k: int, out: FrontEndOutput) -> None:
        loud = np.flatnonzero(np.abs(out.audio) > 1e-4)
        starts.extend((k * FRAME_SAMPLES + (int(loud[0]) if len(loud) else 0), text) for text in out.text)
        audio.append(out.audio)
        while fe.mouth.voicer.synthesizing:  # the voice keeps up within the frame, whatever the load
            time.sleep(0.001)

    replay(tl, fe, after_step=heard, vad_lag=vad_lag)
    ends = [e.get("audio_s", e["t"]) for e in tl["events"] if e["kind"] == "vad_end"]
    return np.concatenate(audio), starts, (ends[-1] if ends else None)


def answer_time(audio: np.ndarray, starts: list[tuple[int, str]], answers: list[str]) -> float | None:
    """Seconds into `audio` at which an accepted answer's first word begins."""
    words: list[Word] = []
    for i, (s0, text) in enumerate(starts):
        s1 = starts[i + 1][0] if i + 1 < len(starts) else len(audio)
        seg = audio[s0:s1]
        loud = np.flatnonzero(np.abs(seg) > 1e-3)
        dur = (int(loud[-1]) + 1 if len(loud) else len(seg)) / SAMPLE_RATE
        toks = normalize(text).split()
        chars = sum(len(t) + 1 for t in toks) or 1
        pos = 0
        for t in toks:
            words.append(Word(t, s0 / SAMPLE_RATE + dur * pos / chars, s0 / SAMPLE_RATE + dur * (pos + len(t)) / chars))
            pos += len(t) + 1
    hit = find_answer(words, answers)
    return None if hit is None else hit.start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timelines", type=Path, nargs="+")
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--checkpoint", type=Path, action="append", default=[])
    ap.add_argument("--rules", action="append", default=[], choices=sorted(RULES),
                    help="decoding rules to compare, each with every checkpoint (default: the front-end's)")
    ap.add_argument("--vad-lag", type=int, action="append", default=[],
                    help="voice activity measured again from the input audio, this many frames late (default: as recorded)")
    ap.add_argument("--hear", action="store_true", help="also hear each reply with Whisper, as the bench does")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    questions = {q.id: q for q in load_questions(args.questions, None)}
    answers = {qid: q.answers for qid, q in questions.items()}
    tts = HibariTTS()
    transcriber = Transcriber() if args.hear else None
    configs = [(str(ck), rules, lag) for ck in (args.checkpoint or [DEFAULT_CHECKPOINT])
               for rules in (args.rules or ["default"]) for lag in (args.vad_lag or [None])]
    checkpoints = [ck + "".join(f" [{x}]" for x in (rules if rules != "default" else None,
                                                   None if lag is None else f"vad lag {lag}") if x)
                   for ck, rules, lag in configs]
    runs = []
    for (path_ck, rules, lag), ck in zip(configs, checkpoints):
        # each configuration from the same voice as a fresh stack's: only the first words cached (a cache
        # warmed by the configuration before played its short segments a frame sooner)
        phrase_cache(tts).clear()
        warm_first_words(tts)
        fe = CompactFrontEnd(path_ck, tts=tts)
        fe.rules = RULES[rules]
        for path in tqdm(args.timelines, desc=f"{Path(path_ck).parent.name} {rules} {lag}"):
            tl = json.loads(path.read_text())
            qid = tl.get("meta", {}).get("question_id") or path.name.split(".")[0]
            audio, starts, end_s = voice_replay(tl, fe, lag)
            first = next((s for s, _ in starts), None)
            ans = answer_time(audio, starts, answers.get(qid, []))
            run = {"timeline": str(path), "question_id": qid, "checkpoint": ck,
                   "onset_s": None if first is None or end_s is None else round(first / SAMPLE_RATE - end_s, 3),
                   "answer_s": None if ans is None or end_s is None else round(ans - end_s, 3),
                   "segments": len(starts), "said": " ".join(t for _, t in starts)}
            if transcriber is not None and qid in questions and end_s is not None:
                q = questions[qid]
                words = hear(transcriber, audio, q.answers, listening_context(q.question, q.answers), after=end_s)
                hit = find_answer(words, q.answers, end_s)
                run.update(heard=" ".join(w.text for w in words),
                           heard_answer_s=None if hit is None else round(hit.start - end_s, 3))
            runs.append(run)
        fe.close()
    both = [p for p in {r["timeline"] for r in runs}
            if all(any(r["timeline"] == p and r["checkpoint"] == ck and r["answer_s"] is not None for r in runs)
                   for ck in checkpoints)]
    summary = []
    for ck in checkpoints:
        mine = [r for r in runs if r["checkpoint"] == ck]
        common = [r for r in mine if r["timeline"] in both]
        summary.append({"checkpoint": ck, "timelines": len(mine),
                        "answer_said": sum(r["answer_s"] is not None for r in mine),
                        "answer_s_median_common": round(statistics.median(r["answer_s"] for r in common), 3) if common else None,
                        "onset_s_median": round(statistics.median(r["onset_s"] for r in mine if r["onset_s"] is not None), 3),
                        "segments_median_common": statistics.median(r["segments"] for r in common) if common else None,
                        "common": len(common)})
        if transcriber is not None:
            summary[-1]["answer_heard"] = sum(r.get("heard_answer_s") is not None for r in mine)
    if len(checkpoints) == 2:  # the same inputs through both: the paired difference says more than two medians
        diffs = [a["answer_s"] - b["answer_s"] for p in both
                 for a in runs if a["timeline"] == p and a["checkpoint"] == checkpoints[0]
                 for b in runs if b["timeline"] == p and b["checkpoint"] == checkpoints[1]]
        summary.append({"paired_answer_s_difference_median": round(statistics.median(diffs), 3) if diffs else None,
                        "sooner": sum(d < -0.02 for d in diffs), "later": sum(d > 0.02 for d in diffs),
                        "first": checkpoints[0], "second": checkpoints[1]})
    for s in summary:
        print(json.dumps(s))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
