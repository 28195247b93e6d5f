"""Command line: `tandem run`, `tandem say`, `tandem bench`."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from .runtime.errors import TandemError
from .frontends.moshi.options import add_cli_args as add_moshi_args
from .frontends.moshi.options import add_train_args as add_moshi_train_args
from .frontends.moshi.options import export_env as export_moshi_env
from .frontends.moshi.options import kwargs_from_args as moshi_kwargs
from .think.oracle import DEFAULT_POLICY, POLICIES
from .server.capacity import DEFAULT_MAX_SESSIONS


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
    s.add_argument("--voice", choices=["festival", "flite", "espeak"], default="festival")
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
    b.add_argument("--modes", default="cascade", help="comma-separated modes")
    b.add_argument("--out", type=Path, required=True, help="output directory")
    b.add_argument("--voice", choices=["festival", "flite", "espeak"], default="festival")
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
    lt.add_argument("--voice", choices=["festival", "flite", "espeak"], default="festival")
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
            return _cmd_run(args)
        if args.cmd == "say":
            from .audio.frames import write_mono
            from .audio.voices import speak

            write_mono(args.out, speak(args.text, args.voice, tail_s=args.tail))
            return 0
        if args.cmd == "train":
            return _cmd_train(args)
        if args.cmd == "evaluate":
            return _cmd_evaluate(args)
        if args.cmd == "replay":
            return _cmd_replay(args)
        if args.cmd == "bench":
            from .bench.questions import run_bench

            export_moshi_env(args)  # bench builds its front-ends by name only; the moshi factory reads these

            if args.llm_delay is not None:
                from .bench.delay import run_delay_bench

                return run_delay_bench(args)
            if args.llm_rate is not None:
                raise TandemError("--llm-rate paces the LLM of an --llm-delay run: give --llm-delay too (0 for none)")
            return run_bench(args)
        if args.cmd == "serve":
            return _cmd_serve(args)
        if args.cmd == "llm-server":
            return _cmd_llm_server(args)
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


def _cmd_llm_server(args: argparse.Namespace) -> int:
    import threading

    from .runtime.children import Supervisor
    from .llm.local_server import LocalLlamaServer

    if not 0 < args.port < 65536:
        raise TandemError("--port must be between 1 and 65535")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalLlamaServer(threads=args.threads, port=args.port, parallel=args.parallel) as srv:
        sup = Supervisor()
        sup.subscribe(lambda ev: print(f"tandem: {ev.get('part')} {ev.get('action')}"
                                       + (f": {ev['error']}" if ev.get("error") else ""), file=sys.stderr, flush=True))
        sup.watch(srv)
        print(f"tandem: LLM server on {srv.url} (model {srv.model}); give it to `tandem serve --llm-url {srv.url} "
              f"--llm-model {srv.model}`", flush=True)
        try:
            while not stop.wait(0.5):
                pass
        finally:
            sup.close()
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from .server.app import ServerConfig
    from .server.protocol import Limits
    from .server.serve import ServeOptions, serve

    fe_kwargs = {"checkpoint": args.checkpoint} if args.checkpoint else {}
    if args.front_end == "moshi":
        fe_kwargs.update(moshi_kwargs(args))
    if args.idle_timeout <= 0 or args.session_timeout <= 0:
        raise TandemError("--idle-timeout and --session-timeout must be positive")
    opts = ServeOptions(
        server=ServerConfig(host=args.host, port=args.port, token=args.token, allow_origins=tuple(args.allow_origin),
                            allow_hosts=tuple(args.allow_host)),
        mode=args.mode, max_sessions=args.max_sessions, record_dir=args.record, front_end=args.front_end,
        front_end_kwargs=fe_kwargs, llm_url=args.llm_url, llm_model=args.llm_model,
        allow_llm_down=args.allow_llm_down, knowledge=args.knowledge, knowledge_index=args.knowledge_index,
        knowledge_passages=args.knowledge_passages,
        limits=Limits(idle_timeout_s=args.idle_timeout, session_timeout_s=args.session_timeout))
    return serve(opts)


def _cmd_train(args: argparse.Namespace) -> int:
    if args.what == "moshi":
        from .train.moshi.train import run_cli

        return run_cli(args)
    from .frontends.compact.model import CompactConfig
    from .train.compact.train import TrainConfig, train_compact

    out = args.out or Path(__file__).parent / "frontends" / "compact" / "assets"
    cfg = TrainConfig(minutes=args.minutes, seed=args.seed, max_steps=args.max_steps, steps=args.steps, init=args.init,
                      lr=args.lr or (1e-3 if args.init else 3e-3), warmup=50 if args.init else 150)
    if args.tiny:
        cfg = TrainConfig(minutes=args.minutes, seed=args.seed, max_steps=args.max_steps, batch=4, seq=96,
                          model=CompactConfig(vocab=400, d=32, layers=1, heads=2, window=64, pointer_follow=True),
                          eval_every=10, eval_batches=1, warmup=5)
    meta = train_compact(cfg, out)
    print(f"trained {meta['steps']} steps in {meta['minutes']} min; held-out loss {meta['final_heldout_loss']}; "
          f"checkpoint {out / 'compact.pt'}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import json

    import torch

    from .frontends.compact.checkpoint import load_checkpoint
    from .frontends.compact.frontend import DEFAULT_CHECKPOINT
    from .train.compact.evaluate import evaluate, step_times

    path = args.checkpoint or DEFAULT_CHECKPOINT
    if not path.exists():
        raise TandemError(f"no checkpoint at {path}; train one with `tandem train compact`")
    torch.set_num_threads(1)
    model, tok, meta = load_checkpoint(path)
    model.copy_since_reset = not args.copy_any_oracle
    if not 0.0 <= args.late_first_oracle <= 1.0:
        raise TandemError("--late-first-oracle is a share between 0 and 1")
    res = {**evaluate(model, tok, n=args.n, progress=True, policy=args.oracle_policy,
                      late_first_oracle_p=args.late_first_oracle,
                      rules=_decode_rules(args)),
           **step_times(model), "copy_since_reset": model.copy_since_reset, "checkpoint_meta": meta}
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


def _add_decode_rule_flags(p: argparse.ArgumentParser) -> None:
    """The switches of the compact front-end's decoding rules (`decoding.DecodeRules`), to measure each."""
    p.add_argument("--no-word-cursor", action="store_true",
                   help="decode without completing copied oracle words from the oracle (to measure the cursor)")
    p.add_argument("--no-repair", action="store_true",
                   help='decode without the "sorry," repair when a newer oracle contradicts the reply (to measure it)')
    p.add_argument("--no-settled-turn", action="store_true",
                   help="let the model alone decide its turn once the oracle answers the final transcript "
                        "(the rule before 2026-12-04: overruled only after 12 quiet frames)")
    p.add_argument("--copy-any-oracle", action="store_true",
                   help="let the pointer copy from oracles withdrawn by a reset too (the rule before 2026-12-02)")


def _decode_rules(args: argparse.Namespace):  # noqa: ANN202 - DecodeRules, imported late (torch)
    from .frontends.compact.decoding import DecodeRules

    return DecodeRules(word_cursor=not args.no_word_cursor, repair=not args.no_repair,
                       settled_turn=not args.no_settled_turn)


def _cmd_replay(args: argparse.Namespace) -> int:
    import json

    from .bench.common import load_questions
    from .frontends.compact.frontend import DEFAULT_CHECKPOINT, CompactFrontEnd
    from .frontends.compact.replay import replay, summarize
    from .record.timeline import load

    answers = {q.id: q.answers for q in load_questions(args.questions, None)} if args.questions else {}
    timelines = []
    for path in args.timelines:
        try:
            tl = load(path)
        except (OSError, ValueError) as e:
            raise TandemError(f"{path}: not a readable timeline ({e})") from e
        if not tl.get("frames", {}).get("oracle_token"):
            raise TandemError(f"{path}: the timeline has no frames to replay")
        timelines.append((tl.get("meta", {}).get("question_id") or path.stem, tl))
    report = {}
    for ck in args.checkpoint or [DEFAULT_CHECKPOINT]:
        fe = CompactFrontEnd(ck)
        fe.rules = _decode_rules(args)
        fe.model.copy_since_reset = not args.copy_any_oracle
        results = [replay(tl, fe, name, policy=args.oracle_policy) for name, tl in timelines]
        print(f"== {ck}")
        for r in results:
            turn = "-" if r.turn_frames_after_end is None else f"{r.turn_frames_after_end:+d}"
            print(f"{r.name[:24]:24} turn {turn:>4}  {r.said[:90]}")
        summary = summarize(results, answers)
        print(json.dumps(summary))
        report[str(ck)] = {"summary": summary, "runs": [
            {"name": r.name, "said": r.said, "recorded_said": r.recorded_said, "turn_frames_after_vad_end":
             r.turn_frames_after_end, "vad_source": r.inputs.vad_source} for r in results]}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from .speak import frontend
    from .audio.frames import load_input
    from .record.metrics import summarize
    from .runner import run_session, write_outputs
    from .turn.session import SessionConfig
    from .runtime.stack import Stack, stack_config

    audio = load_input(args.input)  # fail on bad input before starting anything
    fe_kwargs = {"checkpoint": args.checkpoint} if args.checkpoint else {}
    if args.front_end == "moshi":
        fe_kwargs.update(moshi_kwargs(args))
    if args.mode in ("tandem", "frontend"):
        frontend.build(args.front_end, **fe_kwargs)  # fail now, with a clear message, if it is not available
    cfg = SessionConfig(mode=args.mode, pace=args.pace)
    with Stack(stack_config(args, need_llm=args.mode != "frontend")) as stack:
        result = run_session(stack, audio, cfg, front_end_name=args.front_end, oracle_policy=args.oracle_policy,
                             meta={"input": str(args.input)},
                             front_end_kwargs=fe_kwargs or None, finish_reply_s=max(0.0, args.finish_reply))
    write_outputs(result, args.out, args.timeline, args.plot)
    s = summarize(result.timeline.to_dict())
    print(f"heard:   {s['final_text']!r}")
    print(f"said:    {s['said']!r}")
    onset = f"{s['onset_s']:.2f} s" if s["onset_s"] is not None else "no answer"
    print(f"onset latency (end of speech -> first assistant audio): {onset}")
    heard_answer = True
    if args.answer:
        from .bench.scoring import Transcriber, find_answer, hear, listening_context, speech_end_of

        end = speech_end_of(result.input.samples)
        # the question as the Listener heard it is the listener's context (scoring.hear)
        words = hear(Transcriber(), result.assistant, args.answer,
                     listening_context(s["final_text"] or "", args.answer), after=end or 0.0)
        hit = find_answer(words, args.answer, after=end or 0.0)
        heard_answer = hit is not None and end is not None
        print(f"heard from the assistant: {' '.join(w.text for w in words)!r}")
        print("answer latency (end of speech -> answer word spoken): "
              + (f"{hit.start - end:.2f} s" if heard_answer else "answer not spoken"))
    print(f"frames: {s.get('frames', 0)}, p99 lateness {s.get('late_p99_ms', 0):.1f} ms, "
          f"deadline misses {s.get('deadline_misses', 0)}")
    for err in s["error_messages"]:
        print(f"error:   {err}")
    for label, path in (("output", args.out), ("timeline", args.timeline), ("plot", args.plot)):
        if path:
            print(f"{label}: {path}")
    if not heard_answer:  # `make demo` is the proof that an install works: a silent failure must not pass
        print(f"tandem: the answer ({' / '.join(args.answer)}) was not heard in the assistant's speech", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
