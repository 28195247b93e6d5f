"""The timeline plot draws every kind of event a session records, including the talk-over ones."""
from tandem.record.plot import plot_timeline


def test_the_plot_draws_openings_pauses_resumes_and_yields(tmp_path):
    tl = {"meta": {"mode": "tandem"}, "frames": {"t": [0.0, 0.08, 0.16], "oracle_token": [0, 5, 0], "vad": [0.9, 0.1, 0.0],
                                                  "text": ["", "The", ""], "late_ms": [0, 0, 0], "step_ms": [1, 1, 1]},
          "events": [{"kind": "restate", "t": 0.1, "text": "The capital of Chile is", "stream": 1},
                     {"kind": "voice_pause", "t": 1.0, "reason": "talked over"},
                     {"kind": "backchannel", "t": 1.4, "reason": "backchannel", "words": "mm-hmm"},
                     {"kind": "voice_pause", "t": 2.0, "reason": "talked over"},
                     {"kind": "barge_in", "t": 2.5, "reason": "model"},
                     {"kind": "assistant_text", "t": 0.5, "text": "The capital"}]}
    out = tmp_path / "t.png"
    plot_timeline(tl, out)
    assert out.stat().st_size > 10_000
