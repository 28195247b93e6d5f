"""What each `tandem` command does once its arguments are parsed (cli.py parses them): run, serve,
llm-server, train, evaluate, replay."""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from .runtime.errors import TandemError
from .frontends.moshi.options import kwargs_from_args as moshi_kwargs


def llm_server(args: argparse.Namespace) -> int:
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


def serve(args: argparse.Namespace) -> int:
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


def train(args: argparse.Namespace) -> int:
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


def evaluate(args: argparse.Namespace) -> int:
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
                      rules=decode_rules(args)),
           **step_times(model), "copy_since_reset": model.copy_since_reset, "checkpoint_meta": meta}
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0




def decode_rules(args: argparse.Namespace):  # noqa: ANN202 - DecodeRules, imported late (torch)
    from .frontends.compact.decoding import DecodeRules

    return DecodeRules(word_cursor=not args.no_word_cursor, repair=not args.no_repair,
                       settled_turn=not args.no_settled_turn, commit=not getattr(args, "no_commit", False))


def replay(args: argparse.Namespace) -> int:
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
        fe.rules = decode_rules(args)
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


def run(args: argparse.Namespace) -> int:
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

