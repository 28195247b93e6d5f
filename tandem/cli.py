"""Command line: `tandem run`, `tandem say`, `tandem bench`."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from .audio.voices import VOICES
from .runtime.errors import TandemError
from .frontends.moshi.options import add_cli_args as add_moshi_args
from .frontends.moshi.options import add_train_args as add_moshi_train_args
from .frontends.moshi.options import export_env as export_moshi_env
from .think.oracle import DEFAULT_POLICY, POLICIES
from .server.capacity import DEFAULT_MAX_SESSIONS
from . import commands


def _add_llm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--llm-url", default=None,
                   help="OpenAI-compatible server (e.g. http://127.0.0.1:8000/v1); default: start the embedded "
                        "SmolLM2 llama.cpp server on loopback (env TANDEM_LLM_URL)")
    p.add_argument("--llm-model", default=None, help="model name for --llm-url (env TANDEM_LLM_MODEL; default: "
                                                     "the server's only model)")
    p.add_argument("--allow-llm-down", action="store_true",
                   help="start even when --llm-url does not answer its start-up check (an LLM started later); "
                        "the front-end speaks alone until it answers")


def _add_knowledge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--knowledge", type=Path, default=None, metavar="PATH",
                   help="answer from these documents too: a folder of .md/.txt/.html files, or one file. Passages "
                        "are searched from the user's partial transcript and go into the LLM's prompt (both modes)")
    p.add_argument("--knowledge-index", type=Path, default=None, metavar="FILE",
                   help="the documents' index (SQLite; default: ~/.cache/tandem/knowledge/), rebuilt only for "
                        "documents that changed")
    p.add_argument("--knowledge-passages", type=int, default=1, metavar="N",
                   help="passages per prompt (default 1: the embedded 135M LLM reads one best; a bigger LLM "
                        "can take 3)")


def _llm_delays(text: str) -> list[float]:
    from .bench.delay import parse_delays  # imported only when the option is given

    return parse_delays(text)


def _llm_rate(text: str) -> float:
    from .bench.delay import parse_rate

    return parse_rate(text)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tandem", description="Tandem speech-to-speech: a fast front-end fed by a thinking back-end.")
    ap.add_argument("-v", "--verbose", action="store_true", help="log what the back-end does")
    sub = ap.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="answer a spoken wav file, writing the stereo output, a timeline and a plot")
    r.add_argument("input", type=Path, help="wav file (mono/stereo, any rate, 16/24/32-bit or float)")
    r.add_argument("--mode", choices=["tandem", "frontend", "cascade"], default="tandem")
    r.add_argument("--out", type=Path, default=None, help="output wav: 24 kHz stereo, user left, assistant right")
    r.add_argument("--timeline", type=Path, default=None, help="timeline JSON (docs/TIMELINE.md)")
    r.add_argument("--plot", type=Path, default=None, help="timeline plot (PNG)")
    r.add_argument("--pace", choices=["realtime", "fast"], default="realtime")
    r.add_argument("--finish-reply", type=float, default=15.0, metavar="SECONDS",
                   help="go on past the input's end until the assistant has finished its reply, for at most "
                        "this long (the output is then longer than the input); 0 cuts it at the input's end")
    r.add_argument("--front-end", default="compact", help="front-end for tandem/frontend modes")
    r.add_argument("--checkpoint", type=Path, default=None, help="front-end checkpoint (default: the shipped one)")
    r.add_argument("--oracle-policy", default=DEFAULT_POLICY, help=f"oracle stream policy ({', '.join(POLICIES)})")
    r.add_argument("--answer", action="append", default=[],
                   help="an accepted answer word; when given, the assistant channel is transcribed, the "
                        "answer latency printed, and the exit code is 1 if no such word was heard (repeatable)")
    _add_llm_args(r)
    _add_knowledge_args(r)
    add_moshi_args(r)

    s = sub.add_parser("say", help="speak a text with a test voice (not the assistant's) into a wav")
    s.add_argument("text")
    s.add_argument("out", type=Path)
    s.add_argument("--voice", choices=list(VOICES), default="festival")
    s.add_argument("--tail", type=float, default=3.0, help="seconds of silence after the speech")

    t = sub.add_parser("train", help="train a front-end")
    t.add_argument("what", choices=["compact", "moshi"])
    t.add_argument("--minutes", type=float, default=45.0, help="wall-clock budget for the whole run")
    t.add_argument("--out", type=Path, default=None, help="directory for compact.pt, loss.png, history.json "
                   "(default: the shipped assets directory)")
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--tiny", action="store_true", help="a tiny model and batch, for tests")
    t.add_argument("--max-steps", type=int, default=100_000)
    t.add_argument("--init", type=Path, default=None,
                   help="continue training from this checkpoint (keeps its tokenizer) instead of from scratch")
    t.add_argument("--lr", type=float, default=None, help="peak learning rate (default 3e-3; 1e-3 with --init)")
    t.add_argument("--steps", type=int, default=None,
                   help="plan the learning-rate schedule over this many steps (default: as many as the time "
                        "budget allows, estimated from the first steps; a busy machine then trains less)")
    add_moshi_train_args(t)

    e = sub.add_parser("evaluate", help="behaviour of a front-end on held-out synthetic dialogues")
    e.add_argument("what", choices=["compact"])
    e.add_argument("--checkpoint", type=Path, default=None)
    e.add_argument("-n", type=int, default=200, help="dialogues with a normal oracle (half as many replaced, a quarter with none)")
    e.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    e.add_argument("--oracle-policy", default=DEFAULT_POLICY, choices=["kame", "prefix"],
                   help="how the simulated oracles are fed (the model is trained on both)")
    e.add_argument("--late-first-oracle", type=float, default=0.0, metavar="P",
                   help="share of turns whose first oracle comes as late as on the real stack (a harder variant)")
    _add_decode_rule_flags(e)

    rp = sub.add_parser("replay", help="recorded timelines through compact checkpoints, offline (no Listener, LLM or voice)")
    rp.add_argument("timelines", type=Path, nargs="+", help="timeline JSON files (from run, bench or serve --record)")
    rp.add_argument("--checkpoint", type=Path, action="append", default=[],
                    help="compact checkpoint; repeat to compare several side by side (default: the shipped one)")
    rp.add_argument("--questions", type=Path, default=None,
                    help="questions JSONL as for bench: count the timelines whose replayed words contain an answer")
    rp.add_argument("--oracle-policy", default=None, choices=sorted(POLICIES),
                    help="feed the recorded oracle text with this policy (default: the one each timeline recorded)")
    rp.add_argument("--out", type=Path, default=None, help="write per-timeline results and summaries as JSON")
    _add_decode_rule_flags(rp)

    b = sub.add_parser("bench", help="spoken questions (or dialogues) through the modes, with latency figures")
    what = b.add_mutually_exclusive_group(required=True)
    what.add_argument("--questions", type=Path, help="JSONL with id, question, answers")
    what.add_argument("--dialogues", type=Path,
                      help="JSONL with id, kind (followup, interrupt, backchannel), turns of say, answers and "
                           "talk_over_s: each dialogue as one track, its last turn scored (docs/BENCHMARKS.md)")
    what.add_argument("--fdb", type=Path, metavar="DIR",
                      help="Full-Duplex-Bench v1 layout (<task>/<id>/input.wav with pause.json, turn_taking.json, "
                           "interrupt.json; *backchannel*/<id>/input.wav): outputs where FDB's scripts read them, "
                           "scored by its rules (`tandem fdb-devset` writes a dev set)")
    b.add_argument("--fdb-tasks", type=lambda s: [t.strip() for t in s.split(",") if t.strip()], default=None,
                   metavar="T[,T...]", help="with --fdb: only these tasks (pause, turn, interruption, backchannel)")
    b.add_argument("--server", default=None, metavar="URL",
                   help="with --fdb: play each item to a running `tandem serve` (ws://HOST:PORT) as FDB's own Moshi "
                        "client does, in place of sessions here (the mode is the server's)")
    b.add_argument("--modes", default="cascade", help="comma-separated modes")
    b.add_argument("--out", type=Path, required=True, help="output directory")
    b.add_argument("--voice", choices=list(VOICES), default="festival")
    b.add_argument("--limit", type=int, default=None)
    b.add_argument("--stride", type=int, default=1, help="take every N-th question (a spread over a file grouped by topic)")
    b.add_argument("--tail", type=float, default=4.0, help="seconds of silence after each question")
    b.add_argument("--policy", default=DEFAULT_POLICY,
                   help="oracle policy for tandem mode; several, comma-separated, are compared side by side "
                        f"({', '.join(POLICIES)})")
    b.add_argument("--front-end", default="compact")
    b.add_argument("--checkpoint", type=Path, default=None, help="compact front-end checkpoint (default: the shipped one)")
    b.add_argument("--llm-load", action="store_true",
                   help="keep a second embedded LLM generating during the runs (Listener under load)")
    b.add_argument("--llm-delay", type=_llm_delays, default=None, metavar="S[,S...]",
                   help="run the modes at each of these LLM delays (s before the first token, e.g. 0,0.5,1,2) "
                        "through a loopback proxy in front of the LLM: a stand-in for a bigger, slower model")
    b.add_argument("--llm-rate", type=_llm_rate, default=None, metavar="TOK_PER_S",
                   help="with --llm-delay: also pace the LLM's tokens after the first to this rate")
    _add_llm_args(b)
    _add_knowledge_args(b)
    add_moshi_args(b)

    fd = sub.add_parser("fdb-devset", help="write the project's full-duplex dev set in Full-Duplex-Bench's layout")
    fd.add_argument("--out", type=Path, required=True, help="folder to write <task>/<id>/input.wav and task files")
    fd.add_argument("--tasks", type=lambda s: [t.strip() for t in s.split(",") if t.strip()], default=None,
                    metavar="T[,T...]", help="only these (pause, turn, interruption, backchannel, user_backchannel)")

    v = sub.add_parser("serve", help="real-time server: Moshi's WebSocket protocol at /api/chat, browser client at /")
    v.add_argument("--host", default="127.0.0.1", help="address to bind (anything but loopback needs --token)")
    v.add_argument("--port", type=int, default=8998)
    v.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, metavar="N",
                   help=f"concurrent sessions, each with an LLM slot of its own; more are told the server is busy "
                        f"(HTTP 503). Default {DEFAULT_MAX_SESSIONS}: what `tandem loadtest` measured at single-session "
                        "quality on 2 cores (docs/BENCHMARKS.md, \"Capacity\")")
    v.add_argument("--token", default=os.environ.get("TANDEM_TOKEN"),
                   help="clients must present it (?token= or Authorization: Bearer); required off loopback "
                        "(env TANDEM_TOKEN)")
    v.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="a browser origin allowed besides this server's own (repeatable; * for any)")
    v.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a Host name clients may address this server by, besides localhost, IP addresses and "
                        "--host (repeatable; * for any; a defence against DNS rebinding)")
    v.add_argument("--record", type=Path, default=None, metavar="DIR",
                   help="per session: stereo wav (user left, assistant right) and timeline, flushed every second")
    v.add_argument("--mode", choices=["tandem", "frontend", "cascade"], default="tandem")
    v.add_argument("--front-end", default="compact", help="front-end for tandem/frontend modes")
    v.add_argument("--checkpoint", type=Path, default=None, help="front-end checkpoint (default: the shipped one)")
    v.add_argument("--idle-timeout", type=float, default=60.0, help="close a session after this long without audio (s)")
    v.add_argument("--session-timeout", type=float, default=3600.0, help="longest session (s)")
    _add_llm_args(v)
    _add_knowledge_args(v)
    add_moshi_args(v)

    ls = sub.add_parser("llm-server", help="the embedded LLM alone, as a service on loopback that several "
                                           "`tandem serve` instances share (--llm-url), supervised until Ctrl-C")
    ls.add_argument("--port", type=int, default=8090)
    ls.add_argument("--threads", type=int, default=1, help="CPU threads for the LLM")
    ls.add_argument("--parallel", type=int, default=DEFAULT_MAX_SESSIONS, metavar="N",
                    help="requests at once, each in a slot of its own, batched (default: serve's --max-sessions)")

    lt = sub.add_parser("loadtest", help="N concurrent protocol clients speaking questions in real time")
    lt.add_argument("--sessions", default="4", metavar="N[,N...]",
                    help="concurrent clients; several (1,2,4,6) step through them, a fresh server each, and print "
                         "the capacity: the most sessions at which every measure of what users hear holds")
    lt.add_argument("--duration", type=float, default=60.0, help="seconds of conversation per client")
    lt.add_argument("--url", default=None, help="server to test (http://HOST:PORT); default: start one for the run")
    lt.add_argument("--token", default=os.environ.get("TANDEM_TOKEN"))
    lt.add_argument("--questions", type=Path, default=None, help="JSONL with a `question` field (default: 12 built in; "
                                                                   "each session asks its own at every moment)")
    lt.add_argument("--stagger", type=float, default=0.0, metavar="SECONDS",
                    help="start session i this much after session i-1 (default 0: all at the same moment)")
    lt.add_argument("--plot", type=Path, default=None, help="sweep plot (PNG): sessions against first sound and "
                                                             "answers heard")
    lt.add_argument("--limit", type=int, default=None, help="use the first N questions")
    lt.add_argument("--voice", choices=list(VOICES), default="festival")
    lt.add_argument("--tail", type=float, default=4.0, help="seconds of silence after each question")
    lt.add_argument("--mode", choices=["tandem", "frontend", "cascade"], default="tandem",
                    help="mode of the server started for the run")
    lt.add_argument("--record", type=Path, default=None, help="--record DIR for the server started for the run")
    lt.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for the server started for the run (repeat for several: "
                         "--server-arg=--mode --server-arg=cascade)")
    lt.add_argument("--out", type=Path, default=None, help="write the per-session results as JSON")
    _add_llm_args(lt)
    return ap


def _on_sigterm(signum, frame):  # noqa: ANN001
    raise KeyboardInterrupt  # unwinds through the context managers that stop the servers


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _on_sigterm)
    # a shell starts background jobs with SIGINT ignored, and Python then never raises
    # KeyboardInterrupt: `kill -INT` would be lost and the run would go on with its LLM server
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if args.cmd == "run":
            return commands.run(args)
        if args.cmd == "say":
            from .audio.frames import write_mono
            from .audio.voices import speak

            write_mono(args.out, speak(args.text, args.voice, tail_s=args.tail))
            return 0
        if args.cmd == "train":
            return commands.train(args)
        if args.cmd == "evaluate":
            return commands.evaluate(args)
        if args.cmd == "replay":
            return commands.replay(args)
        if args.cmd == "bench":
            from .bench.questions import run_bench

            export_moshi_env(args)  # bench builds its front-ends by name only; the moshi factory reads these

            if args.llm_delay is not None:
                from .bench.delay import run_delay_bench

                return run_delay_bench(args)
            if args.llm_rate is not None:
                raise TandemError("--llm-rate paces the LLM of an --llm-delay run: give --llm-delay too (0 for none)")
            return run_bench(args)
        if args.cmd == "fdb-devset":
            from .bench.fdb_devset import run_devset

            return run_devset(args)
        if args.cmd == "serve":
            return commands.serve(args)
        if args.cmd == "llm-server":
            return commands.llm_server(args)
        if args.cmd == "loadtest":
            from .server.loadtest import run_loadtest

            return run_loadtest(args)
    except TandemError as e:
        print(f"tandem: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tandem: interrupted", file=sys.stderr)
        return 130
    return 1


def _add_decode_rule_flags(p: argparse.ArgumentParser) -> None:
    """The switches of the compact front-end's decoding rules (`decoding.DecodeRules`), to measure each."""
    p.add_argument("--no-word-cursor", action="store_true",
                   help="decode without completing copied oracle words from the oracle (to measure the cursor)")
    p.add_argument("--no-repair", action="store_true",
                   help='decode without the "sorry," repair when a newer oracle contradicts the reply (to measure it)')
    p.add_argument("--no-settled-turn", action="store_true",
                   help="let the model alone decide its turn once the oracle answers the final transcript "
                        "(the rule before 2026-12-04: overruled only after 12 quiet frames)")
    p.add_argument("--no-commit", action="store_true",
                   help="say every word as the model chooses it, before its answer is settled too (to measure the gate)")
    p.add_argument("--copy-any-oracle", action="store_true",
                   help="let the pointer copy from oracles withdrawn by a reset too (the rule before 2026-12-02)")


if __name__ == "__main__":
    sys.exit(main())
