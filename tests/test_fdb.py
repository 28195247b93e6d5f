"""`tandem bench --fdb` and `tandem fdb-devset`: Full-Duplex-Bench's rules on constructed transcripts and
audio, its layout read and written, the dev set rendered (fast), and a real run over a few items (slow)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tandem.bench import fdb, fdb_rules as R
from tandem.bench.scoring import Word
from tandem.runtime.errors import TandemError


def chunks(*words: tuple[str, float, float | None]) -> list[dict]:
    return [{"text": w, "timestamp": [a, b]} for w, a, b in words]


@pytest.mark.parametrize("words,taken", [
    ((), False),
    ((("Mm-hmm.", 2.0, 2.4),), False),  # a backchannel
    ((("I'm", 2.0, 2.2), ("here.", 2.2, 2.5)), False),  # two words in half a second
    ((("It", 2.0, 2.1), ("is", 2.1, 2.2), ("a", 2.2, 2.3), ("cat.", 2.3, 2.6)), True),  # four quick words
    ((("Well,", 2.0, 2.4), ("yes.", 2.8, 3.1)), True),  # 1.1 s
    ((("Well,", 2.0, 2.4), ("yes", 2.9, None)), False),  # no end: the last start counts (0.9 s)
])
def test_the_take_turn_rule(words, taken):
    assert R.takes_turn(chunks(*words)) is taken


def test_latency_counts_from_the_turn_end_only_where_the_turn_was_taken():
    reply = chunks(("It", 2.4, 2.5), ("is", 2.5, 2.6), ("Lima,", 2.6, 3.0), ("Peru.", 3.0, 3.6))
    assert R.latency(reply, 2.0) == pytest.approx(0.4)
    assert R.latency(reply, 3.0) == 0.0, "talking before the end counts as no delay"
    assert R.latency(chunks(("Mm.", 2.4, 2.6)), 2.0) is None


def test_a_segments_words_are_the_chunks_overlapping_it():
    cs = chunks(("a", 0.9, 1.1), ("b", 1.2, 1.4), ("c", 1.9, 2.2), ("d", 3.0, 3.2), ("e", 1.5, None))
    assert R.words_in(cs, 1.0, 2.0) == ["a", "b", "c"], "one into its start, one inside, one past its end"


def test_a_backchannel_item_is_judged_by_its_segments():
    mm = chunks(("Mm-hmm.", 3.0, 3.4))
    v = R.judge_backchannel([(2.9, 3.5)], mm, 20.0)
    assert not v.took_floor and v.backchannels == [(2.9, 3.5)] and v.per_s == pytest.approx(0.05)
    long_turn = chunks(*[(f"w{i}", 5.0 + 0.3 * i, 5.2 + 0.3 * i) for i in range(12)])
    assert R.judge_backchannel([(2.9, 3.5), (5.0, 8.6)], mm + long_turn, 20.0).took_floor, "over 3 s of speech"
    assert R.judge_backchannel([(5.0, 6.5)], long_turn, 20.0).took_floor, "1-3 s of speech with words"
    # FDB's script keeps the last short segment's verdict
    v = R.judge_backchannel([(5.0, 6.5), (9.0, 9.5)], long_turn + chunks(("Yeah.", 9.1, 9.4)), 20.0)
    assert not v.took_floor and len(v.backchannels) == 2


def test_the_timing_distance_is_zero_for_the_same_distribution_and_one_for_none():
    truth = [0.0] * 25 + [1.0] * 4 + [0.0] * 72  # people backchannel at 5.0-5.8 s of a 20 s item
    assert R.timing_distance([], 20.0, truth) == 1.0
    same = R.timing_distance([(5.0, 5.8)], 20.0, truth)
    apart = R.timing_distance([(15.0, 15.8)], 20.0, truth)
    assert same < 0.05 < 0.8 < apart <= 1.0


def test_speech_segments_follow_silero_s_defaults():
    w = 512  # 32 ms at 16 kHz
    probs = [0.0] * 10 + [0.9] * 20 + [0.1] * 2 + [0.9] * 10 + [0.1] * 20 + [0.9] * 5 + [0.0] * 10
    segs = R.speech_segments(probs, w, len(probs) * w)
    # a 64 ms dip is inside the speech (< 100 ms); the 160 ms blip at the end is under 250 ms: dropped
    assert segs == [(round((10 * w - 480) / 16000, 1), round((42 * w + 480) / 16000, 1))]


def test_the_vad_finds_speech_in_a_voice_and_nothing_in_silence():
    from tandem.audio.frames import SAMPLE_RATE, resample
    from tandem.audio.voices import speak

    x = resample(speak("The weather is lovely today.", "flite", lead_s=1.0, tail_s=1.0), SAMPLE_RATE, 16000)
    segs = R.vad_segments(x)
    assert segs and segs[0][0] == pytest.approx(1.0, abs=0.2) and segs[-1][1] <= len(x) / 16000
    assert R.vad_segments(np.zeros(16000 * 3, np.float32)) == []


def write_item(root: Path, folder: str, ident: str, name: str | None, event, seconds: float = 2.0) -> Path:
    item = root / folder / ident
    item.mkdir(parents=True)
    sf.write(str(item / "input.wav"), np.full(int(16000 * seconds), 0.1, np.float32), 16000)
    if name:
        (item / name).write_text(json.dumps(event))
    return item


def test_discover_reads_fdb_s_layout_and_says_what_it_expected(tmp_path):
    write_item(tmp_path, "candor_pause_handling", "1", "pause.json", [{"text": "[PAUSE]", "timestamp": [1.0, 2.0]}])
    write_item(tmp_path, "candor_turn_taking", "2", "turn_taking.json", [{"text": "[TURN-TAKING]", "timestamp": [1.5, 2.0]}])
    write_item(tmp_path, "synthetic_user_interruption", "3", "interrupt.json",
               [{"context": "c", "interrupt": "i", "timestamp": [3.0, 4.5], "answers": ["lima"]}])
    write_item(tmp_path, "icc_backchannel", "4", None, None)
    write_item(tmp_path, "notes", "5", None, None)  # no task: left out
    items = fdb.discover(tmp_path)
    assert [(i.task, i.id, i.since) for i in items] == [
        ("pause", "1", 0.0), ("turn", "2", 1.5), ("backchannel", "4", 0.0), ("interruption", "3", 4.5)]
    assert items[3].answers == ["lima"] and items[1].answers == []
    assert [i.task for i in fdb.discover(tmp_path, ["pause"])] == ["pause"]
    with pytest.raises(TandemError, match="no items"):
        fdb.discover(tmp_path / "notes")
    with pytest.raises(TandemError, match="not a folder"):
        fdb.discover(tmp_path / "missing")
    write_item(tmp_path, "bad_turn_taking", "6", "turn_taking.json", {"timestamp": 1})
    with pytest.raises(TandemError, match="turn_taking.json"):
        fdb.discover(tmp_path)


def test_an_item_s_transcript_and_channel_are_written_as_fdb_reads_them():
    words = [Word(".", 0.0, 1.9), Word("It", 1.0, 1.2), Word("is", 1.2, 1.3), Word("-", 1.3, 2.5)]
    assert fdb.as_chunks(words, 10.0) == {"text": "It is", "chunks": [  # no "word" of punctuation alone
        {"text": "It", "timestamp": [11.0, 11.2]}, {"text": "is", "timestamp": [11.2, 11.3]}]}
    out = fdb.output_channel(np.ones(24000, np.float32), 16000, 20000)
    assert len(out) == 20000 and out[:15000].min() > 0.5 and not out[16100:].any(), "16 kHz, padded to the input"


def test_items_are_scored_by_their_task(tmp_path):
    reply = {"text": "It is Lima.", "chunks": chunks(("It", 4.8, 5.0), ("is", 5.0, 5.1), ("Lima.", 5.1, 5.9))}
    intr = fdb.Item("interruption", "x", "1", tmp_path, [{"timestamp": [3.0, 4.5], "answers": ["lima"]}])
    rec = fdb.score_item(intr, reply, None, 20.0, None)
    assert rec["took_turn"] and rec["latency_s"] == pytest.approx(0.3) and rec["answered"]
    pause = fdb.Item("pause", "x", "2", tmp_path, [{"timestamp": [4.9, 6.0]}])
    assert fdb.score_item(pause, reply, None, 8.0, None)["words_in_pause"] == 2, "begun inside the pause"
    bc = fdb.Item("user_backchannel", "x", "3", tmp_path, [{"timestamp": [3.0, 3.4]}])
    talking = np.zeros(24000 * 8, np.float32)
    talking[24000 * 2: 24000 * 6] = 0.3
    assert fdb.score_item(bc, reply, None, 8.0, None, talking)["talked_through"]
    runs = [{"mode": "tandem", "task": "interruption", **rec}, {"mode": "tandem", "task": "interruption",
                                                                 "took_turn": False, "latency_s": None, "answered": False}]
    s = fdb.summarize_fdb(runs)["tandem / interruption"]
    assert s["tor"] == 0.5 and s["latency_mean_s"] == pytest.approx(0.3) and s["answered"] == "1/2"


def test_the_dev_set_is_rendered_in_fdb_s_layout_with_times_on_the_track(tmp_path):
    from tandem.bench.fdb_devset import write_devset

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"pause": [["I'd like to book", "a table for two."]],
                                "interruption": [["Tell me about the sea.", "Wait, who wrote Hamlet?", ["shakespeare"]]],
                                "backchannel": [["I went out.", "It rained.", "I came home."]],
                                "user_backchannel": [["Tell me about cats.", "Mm-hmm."]]}))
    counts = write_devset(tmp_path / "dev", spec)
    assert counts == {"synthetic_pause_handling": 1, "synthetic_user_interruption": 1,
                      "synthetic_backchannel": 1, "synthetic_user_backchannel": 1}
    items = {i.task: i for i in fdb.discover(tmp_path / "dev")}
    assert set(items) == {"pause", "interruption", "backchannel", "user_backchannel"}
    x, rate = sf.read(str(items["pause"].folder / "input.wav"))
    a, b = items["pause"].event[0]["timestamp"]
    assert rate == 16000 and 0.8 <= b - a <= 2.5
    assert np.abs(x[int(a * rate) + 160: int(b * rate) - 160]).max() < 0.02, "the pause is silent"
    assert np.abs(x[int(b * rate): int(b * rate) + 1600]).max() > 0.02, "the sentence goes on after it"
    s, e = items["interruption"].event[0]["timestamp"]
    assert items["interruption"].answers == ["shakespeare"] and 2.5 < s < e < len(sf.read(str(items["interruption"].folder / "input.wav"))[0]) / 16000
    index = [json.loads(line) for line in (tmp_path / "dev" / "items.jsonl").read_text().splitlines()]
    assert len({(i["voice"], i["speed"]) for i in index}) == 4, "each item another voice or speed"


def test_the_shipped_dev_set_has_forty_items_over_the_four_tasks():
    spec = json.loads(Path(fdb.__file__).with_name("fdb_dev.json").read_text())
    assert sum(len(spec[t]) for t in ("pause", "turn", "interruption", "backchannel")) >= 40
    assert all(len(spec[t]) >= 8 for t in ("pause", "turn", "interruption", "backchannel", "user_backchannel"))


@pytest.mark.slow
def test_a_real_fdb_bench_over_a_few_dev_items(tmp_path):
    from tandem.bench.fdb_devset import write_devset

    spec = json.loads(Path(fdb.__file__).with_name("fdb_dev.json").read_text())
    small = tmp_path / "spec.json"
    small.write_text(json.dumps({"turn": spec["turn"][:1], "interruption": spec["interruption"][:1]}))
    write_devset(tmp_path / "dev", small)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "tandem", "bench", "--fdb", str(tmp_path / "dev"), "--modes",
                        "tandem,cascade", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert len(res["runs"]) == 4 and not any(x.get("failed") for x in res["runs"])
    for run in res["runs"]:
        folder = Path(run["output"])
        wav, rate = sf.read(str(folder / "output.wav"))
        assert rate == 16000 and len(wav) == len(sf.read(str(tmp_path / "dev" / folder.parent.name / folder.name / "input.wav"))[0])
        transcript = json.loads((folder / "output.json").read_text())
        assert set(transcript) == {"text", "chunks"} and run["took_turn"] == R.takes_turn(transcript["chunks"])
    assert any(x["took_turn"] for x in res["runs"] if x["task"] == "turn"), "a plain question is answered"
    assert (out / "fdb.png").exists() and "tandem / turn" in res["summary"]


@pytest.mark.slow
def test_fdb_s_client_path_through_tandem_serve_scores_as_the_sessions_here(tmp_path):
    """Item played to a live `tandem serve` the way FDB's Moshi client plays it (fdb_client.py) against the
    same item as a session here: the same verdicts, latencies close."""
    from tandem.bench.fdb_devset import write_devset
    from tandem.llm.local_server import free_port

    spec = json.loads(Path(fdb.__file__).with_name("fdb_dev.json").read_text())
    small = tmp_path / "spec.json"
    small.write_text(json.dumps({"turn": spec["turn"][:2]}))
    write_devset(tmp_path / "dev", small)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tandem", "serve", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "serving on" in server.stdout.readline(), server.stderr.read()
        live = subprocess.run([sys.executable, "-m", "tandem", "bench", "--fdb", str(tmp_path / "dev"), "--server",
                               f"ws://127.0.0.1:{port}", "--out", str(tmp_path / "live")],
                              capture_output=True, text=True, timeout=600)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert live.returncode == 0, live.stderr[-2000:]
    here = subprocess.run([sys.executable, "-m", "tandem", "bench", "--fdb", str(tmp_path / "dev"), "--modes", "tandem",
                           "--out", str(tmp_path / "here")], capture_output=True, text=True, timeout=600)
    assert here.returncode == 0, here.stderr[-2000:]
    a, b = (json.loads((tmp_path / d / "results.json").read_text())["runs"] for d in ("live", "here"))
    assert [r["mode"] for r in a] == ["tandem", "tandem"], "labelled with the server's mode"
    assert [r["took_turn"] for r in a] == [r["took_turn"] for r in b] == [True, True]
    for x, y in zip(a, b):
        assert abs(x["latency_s"] - y["latency_s"]) < 0.4, (x, y)
        assert len(sf.read(x["output"] + "/output.wav")[0]) == len(sf.read(y["output"] + "/output.wav")[0])
