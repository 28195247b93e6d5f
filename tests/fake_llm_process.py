"""A fake LLM server *process* for tests only: speaks enough of the OpenAI protocol for the embedded
server's start-up check and for streaming, and can die with a signal, as a llama.cpp built for
another CPU does (SIGILL at the first matrix product, i.e. at the first completion).

    python tests/fake_llm_process.py [--die-on-request SIGNAL] --host H --port P
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--die-on-request", default=None, help="a signal name, e.g. SIGILL")
    ap.add_argument("--reply", default="Paris is the capital of France.")
    args = ap.parse_args()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a) -> None:  # noqa: ANN002
            pass

        def _json(self, obj) -> None:  # noqa: ANN001
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json({"object": "list", "data": [{"id": "fake", "object": "model"}]})
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if args.die_on_request:
                os.kill(os.getpid(), signal.Signals[args.die_on_request])
                # the signal may be delivered to another thread a moment later: never answer meanwhile
                # (under load this thread once sent its reply first and the start-up check passed)
                time.sleep(30)
            if not req.get("stream"):
                self._json({"choices": [{"index": 0, "message": {"role": "assistant", "content": args.reply},
                                         "finish_reason": "stop"}]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for word in args.reply.split(" "):
                chunk = {"choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
