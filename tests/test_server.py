"""The server over real WebSockets and real Opus, with fakes behind it (tests/test_server_support.py):
the protocol, admission, token and origin checks, abuse, timeouts, recording and leaks."""
from __future__ import annotations

import asyncio
import json
import os
import threading

import aiohttp
import numpy as np
import pytest
import soundfile as sf

from tandem.audio.frames import FRAME_SAMPLES
from tandem.server import protocol as proto
from tandem.server.app import ServerConfig, check_bind
from tandem.server.client import HandshakeError, ProtocolClient
from tandem.runtime.errors import TandemError
from fakes import until
from test_server_support import QUESTION_TEXT, fake_server, question

# a frame loop held up by its back-end misses dozens of frames; a busy CI machine can cost one or two
MISSES_OK = 2


async def converse(base: str, events: bool = True, q: np.ndarray | None = None, **kw) -> ProtocolClient:
    c = await ProtocolClient(base, events=events, **kw).connect()
    await c.speak(question() if q is None else q)
    return c


async def test_a_spoken_question_gets_a_spoken_answer_with_text_and_events():
    async with fake_server() as (base, hub, listener):
        c = await converse(base)
        await asyncio.sleep(0.3)
        st = hub.status()
        await c.close()
    got = c.got
    assert not got.errors
    # one page per 80 ms, silent or not: 2.2 s of speaking + 0.3 s
    assert 26 <= got.pages <= 34, got.pages
    assert len(got.pcm()) >= 26 * FRAME_SAMPLES
    assert "".join(got.texts).split() == ["The", "answer", "is", "Paris."], got.texts
    assert all(t.startswith(" ") for t in got.texts), "pieces carry their leading space, as Moshi's do"
    types = [e["type"] for e in got.events]
    assert types[0] == "session"
    for typ in ("vad_start", "vad_end", "final", "llm_start", "oracle_reset", "oracle", "assistant_text", "latency", "stats"):
        assert typ in types, typ
    assert got.of_type("final")[0]["text"] == QUESTION_TEXT
    lat = got.of_type("latency")[0]
    assert 0.4 <= lat["onset_s"] < 1.2, lat  # 0.4 s endpoint of the fake Listener, then the fake LLM and front-end
    assert got.of_type("stats")[-1]["deadline_misses"] <= MISSES_OK
    # the answer is audible, after the question
    end = c.connected_t + 1.0
    first = c.first_audible_after(end)
    assert first is not None and first - end < 1.5
    assert st["sessions"] == 1 and st["llm"] == {"waiting": 0, "running": 0}


async def test_a_served_session_has_the_llm_go_on_from_the_opening_it_is_saying():
    """The LLM shared by a server's sessions (SharedLLM) asks as a session's own client would: where the
    server continues a reply, with the restated opening as its beginning."""
    asked: list = []
    async with fake_server(llm_tokens=[" Paris", "."], llm_continues=True, llm_requests=asked) as (base, hub, _):
        c = await converse(base)
        await asyncio.sleep(0.3)
        await c.close()
    assert not c.got.errors
    assert asked and asked[-1]["body"]["messages"][-1] == {"role": "assistant", "content": "The capital of France is"}
    assert "".join(c.got.texts).split() == ["The", "capital", "of", "France", "is", "Paris."], c.got.texts


async def test_live_sessions_ask_in_llm_slots_of_their_own_and_give_them_back():
    asked: list = []
    async with fake_server(llm_slots=2, llm_requests=asked) as (base, hub, _):
        a, b = await asyncio.gather(converse(base), converse(base))
        assert not a.got.errors and not b.got.errors
        assert {r["body"]["id_slot"] for r in asked} == {0, 1}, "one slot each, whichever connected first"
        await a.close()
        await b.close()
        await until(lambda: hub.active == 0)  # every session's leave has run to its end
        assert hub.backend.llm.for_session().slot == 0, "both slots were given back"


async def test_an_unmodified_moshi_client_gets_only_moshi_messages():
    async with fake_server(llm_tokens=[" Paris", "."], llm_continues=True) as (base, _, _):
        c = await converse(base, events=False)
        await c.close()
    assert c.got.events == [] and c.got.unknown == 0 and not c.got.errors
    assert "".join(c.got.texts).split() == ["The", "capital", "of", "France", "is", "Paris."]


async def test_cascade_mode_answers_over_the_protocol():
    async with fake_server(mode="cascade") as (base, _, _):
        c = await converse(base, q=question(tail_s=2.0))
        await c.close()
    assert c.got.texts == [" The answer is Paris."]
    assert c.first_audible_after(c.connected_t + 1.0) is not None


async def test_sessions_beyond_the_limit_get_503_before_the_upgrade_and_admitted_ones_do_not_notice():
    async with fake_server(max_sessions=2) as (base, hub, _):
        a = await ProtocolClient(base).connect()
        b = await ProtocolClient(base).connect()
        speaking = [asyncio.create_task(x.speak(question(tail_s=1.5))) for x in (a, b)]
        await asyncio.sleep(0.5)
        with pytest.raises(HandshakeError, match="503"):
            await ProtocolClient(base).connect()
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/api/chat", headers={"Connection": "Upgrade", "Upgrade": "websocket",
                                                             "Sec-WebSocket-Version": "13",
                                                             "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}) as r:
                assert r.status == 503 and r.headers["Retry-After"]
            async with http.get(base + "/api/health") as r:  # what a load balancer asks: no token needed
                assert r.status == 503 and (await r.json())["full"]
        await asyncio.gather(*speaking)
        for x in (a, b):
            assert "".join(x.got.texts).split() == ["The", "answer", "is", "Paris."]
            assert x.got.of_type("stats")[-1]["deadline_misses"] <= MISSES_OK
            assert not x.got.errors
        await a.close()
        await asyncio.sleep(0.2)
        async with aiohttp.ClientSession() as http, http.get(base + "/api/health") as r:
            assert r.status == 200 and await r.json() == {"ready": True, "sessions": 1, "max_sessions": 2,
                                                          "full": False, "down": [], "mode": "tandem"}
        c = await ProtocolClient(base).connect()  # a freed place is available again
        await c.close()
        await b.close()
    assert hub.sessions_total == 3


async def test_token_is_required_when_set_by_query_or_bearer_header():
    async with fake_server(token="s3cret-token") as (base, _, _):
        for kw in ({}, {"token": "wrong-token"}):
            with pytest.raises(HandshakeError, match="401"):
                await ProtocolClient(base, **kw).connect()
        ok = await ProtocolClient(base, token="s3cret-token").connect()
        await ok.close()
        ok = await ProtocolClient(base, headers={"Authorization": "Bearer s3cret-token"}).connect()
        await ok.close()
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/api/status") as r:
                assert r.status == 401
            async with http.ws_connect(base + "/api/chat?token=s3cret-token") as ws:  # still accepted
                assert (await ws.receive_bytes(timeout=5)) == proto.handshake()


async def test_token_in_a_header_or_the_websocket_subprotocol_never_in_the_url():
    assert "token" not in ProtocolClient("http://x", token="s3cret-token").url, "URLs end up in access logs"
    async with fake_server(token="s3cret-token") as (base, _, _):
        c = await ProtocolClient(base, subprotocols=("tandem-token.s3cret-token",)).connect()
        assert c.ws.protocol == "tandem-token.s3cret-token", "the accepted subprotocol is echoed (RFC 6455)"
        await c.close()
        c = await ProtocolClient(base, subprotocols=("other", "tandem-token.wrong", "tandem-token.s3cret-token")).connect()
        assert c.ws.protocol == "tandem-token.s3cret-token"
        await c.close()
        for sub in (("tandem-token.wrong-token",), ("s3cret-token",), ("tandem-token.",)):
            with pytest.raises(HandshakeError, match="401"):
                await ProtocolClient(base, subprotocols=sub).connect()
        async with aiohttp.ClientSession() as http:
            for headers, status in (({"Authorization": "Bearer s3cret-token"}, 200),
                                    ({"Authorization": "Bearer wrong-token"}, 401), ({}, 401)):
                async with http.get(base + "/api/status", headers=headers) as r:
                    assert r.status == status, headers
                    if status == 401:
                        assert "missing or wrong token" in await r.text()
    async with fake_server() as (base, _, _):  # a tokenless server still completes such a client's handshake
        c = await ProtocolClient(base, subprotocols=("tandem-token.stale-token",)).connect()
        assert c.ws.protocol == "tandem-token.stale-token"
        await c.close()


def test_non_loopback_bind_needs_a_token():
    with pytest.raises(TandemError, match="without --token"):
        check_bind(ServerConfig(host="0.0.0.0"))
    with pytest.raises(TandemError, match="at least 8"):
        check_bind(ServerConfig(host="0.0.0.0", token="short"))
    check_bind(ServerConfig(host="0.0.0.0", token="long-enough-token"))
    check_bind(ServerConfig(host="127.0.0.1"))
    check_bind(ServerConfig(host="::1"))


async def test_browser_origins_must_be_this_server_or_allowed():
    async with fake_server(allow_origins=("https://app.example",)) as (base, _, _):
        with pytest.raises(HandshakeError, match="403"):
            await ProtocolClient(base, headers={"Origin": "https://evil.example"}).connect()
        host = base.split("//")[1]
        for origin in (f"http://{host}", "https://app.example"):
            c = await ProtocolClient(base, headers={"Origin": origin}).connect()
            await c.close()


UPGRADE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


async def _get(url: str, headers: dict[str, str]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers=headers) as r:
            return r.status, (await r.text() if r.status != 101 else "")


async def test_dns_rebinding_a_foreign_host_name_is_refused_on_a_tokenless_server():
    async with fake_server() as (base, _, _):
        port = base.rsplit(":", 1)[1]
        # evil.example rebound to 127.0.0.1: its page is same-origin with itself, so Origin matches Host
        evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        for path, extra in (("/api/chat", UPGRADE), ("/api/status", {}), ("/", {})):
            status, text = await _get(base + path, {**extra, **evil})
            assert status == 403 and "host not allowed" in text and "--allow-host evil.example" in text, (path, text)
        with pytest.raises(HandshakeError, match="403"):
            await ProtocolClient(base, headers=evil).connect()
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
            status, _ = await _get(base + "/api/status", {"Host": host})
            assert status == 200, host
            c = await ProtocolClient(base, headers={"Host": host, "Origin": f"http://{host}"}).connect()
            await c.close()
    async with fake_server(allow_hosts=("tandem.example",)) as (base, _, _):
        port = base.rsplit(":", 1)[1]
        c = await ProtocolClient(base, headers={"Host": f"tandem.example:{port}",
                                                "Origin": f"http://tandem.example:{port}"}).connect()
        await c.close()
        assert (await _get(base + "/api/status", {"Host": f"evil.example:{port}"}))[0] == 403


async def test_the_browser_page_sends_the_token_of_its_address_as_a_websocket_subprotocol(tmp_path):
    browser = pytest.importorskip("test_browser")
    if not os.path.exists(browser.CHROMIUM):
        pytest.skip("needs Debian's chromium")
    mic = browser.fake_mic_wav(tmp_path / "q.wav", question(lead_s=0.2, speech_s=0.5, tail_s=3.0))
    async with fake_server(token="s3cret-token") as (base, hub, _):
        # the fragment never reaches the server; the page offers "tandem-token.s3cret-token"
        res = await browser.run_page(base + "/#token=s3cret-token", mic, 10, "browser-token.png",
                                     until=lambda st, lanes: st["pagesIn"] > 10)
        total = hub.sessions_total
    assert not res["problems"] and not res["state"]["errors"], (res["problems"], res["state"]["errors"])
    assert res["state"]["pagesIn"] > 10 and total == 1


def test_host_allow_list_rules():
    from tandem.server.app import host_allowed

    loop = ServerConfig()
    for host in ("localhost", "LOCALHOST:1", "127.0.0.1:8998", "[::1]:8998", "192.168.1.5:8998", "localhost."):
        assert host_allowed(host, loop), host
    for host in (None, "", "evil.example", "evil.example:8998", "localhost.evil.example", "evil@127.0.0.1",
                 "127.0.0.1:port", "127.0.0.1/x"):
        assert not host_allowed(host, loop), host
    assert host_allowed("box.lan:8998", ServerConfig(host="box.lan", token="long-enough-token"))
    assert not host_allowed("box.lan", ServerConfig(host="0.0.0.0", token="long-enough-token")), "not a wildcard bind"
    assert host_allowed("Box.Lan", ServerConfig(allow_hosts=("box.lan",)))
    assert host_allowed("anything", ServerConfig(allow_hosts=("*",)))


def test_serve_takes_allow_host_options():
    from tandem.cli import build_parser

    args = build_parser().parse_args(["serve", "--allow-host", "a.example", "--allow-host", "b.example"])
    assert args.allow_host == ["a.example", "b.example"]


def test_serve_needs_no_tuning_flags_and_gives_every_session_an_llm_slot():
    """The flags that only ever had one good value are gone; the default sessions are the measured capacity."""
    from tandem.cli import build_parser
    from tandem.server.app import ServerConfig
    from tandem.server.capacity import DEFAULT_MAX_SESSIONS
    from tandem.server.serve import ServeOptions

    p = build_parser()
    assert p.parse_args(["serve"]).max_sessions == DEFAULT_MAX_SESSIONS
    serve_help = next(a for a in p._subparsers._group_actions[0].choices.values() if a.prog.endswith("serve")).format_help()
    for gone in ("--llm-parallel", "--llm-concurrency", "--llm-threads", "--listener-lanes", "--input-keep", "--llm-nice"):
        assert gone not in serve_help
    for kept in ("--host", "--port", "--token", "--max-sessions", "--llm-url", "--knowledge", "--record", "--allow-llm-down"):
        assert kept in serve_help
    assert ServeOptions(ServerConfig()).llm_slots == DEFAULT_MAX_SESSIONS
    assert ServeOptions(ServerConfig(), max_sessions=1).llm_slots == 2  # one session: the same engine as many


async def test_malformed_messages_get_errors_and_the_session_goes_on():
    async with fake_server() as (base, hub, _):
        c = await ProtocolClient(base).connect()
        await c.send_raw(b"")
        await c.send_raw(b"\x09abc")
        await c.send_raw(b"\x00")
        await c.send_raw("hello as text")
        await c.send_raw(b"\x06")  # ping: fine
        await c.send_raw(b"\x03\x01")  # control: ignored
        await c.speak(question())
        await c.close()
    errs = c.got.errors
    assert len(errs) == 4, errs
    assert "empty message" in errs[0] and "0x09" in errs[1] and "0x00" in errs[2] and "text frames" in errs[3]
    assert "".join(c.got.texts).split() == ["The", "answer", "is", "Paris."], "the session went on"


@pytest.mark.parametrize("abuse, code, message", [
    ("corrupt", 1007, "corrupt Ogg-Opus"),
    ("huge", 1009, None),
    ("flood", 1008, "rate limit"),
    ("strikes", 1008, "too many malformed"),
])
async def test_abuse_closes_that_connection_only(abuse, code, message):
    limits = proto.Limits(max_message_bytes=16 * 1024, max_strikes=5)
    async with fake_server(limits=limits) as (base, hub, _):
        good = await ProtocolClient(base).connect()
        talk = asyncio.create_task(good.speak(question(tail_s=1.5)))
        bad = await ProtocolClient(base).connect()
        await bad.send_frame(np.zeros(FRAME_SAMPLES, np.float32))
        if abuse == "corrupt":
            await bad.send_raw(b"\x01" + b"this is not an ogg page" * 4)
        elif abuse == "huge":
            await bad.send_raw(b"\x01" + bytes(64 * 1024))
        elif abuse == "flood":
            for _ in range(400):
                if bad.closed.is_set():
                    break
                await bad.send_raw(b"\x06")
        else:
            for _ in range(10):
                await bad.send_raw(b"")
        await asyncio.wait_for(bad.closed.wait(), 5)
        assert bad.close_code == code
        if message:
            assert any(message in e for e in bad.got.errors), bad.got.errors
        await talk
        await good.close()
        assert hub.status()["sessions"] == 0
    assert "".join(good.got.texts).split() == ["The", "answer", "is", "Paris."]
    assert not good.got.errors and good.got.of_type("stats")[-1]["deadline_misses"] <= MISSES_OK


async def test_idle_and_total_session_timeouts():
    async with fake_server(limits=proto.Limits(idle_timeout_s=0.5)) as (base, _, _):
        c = await ProtocolClient(base).connect()
        await asyncio.wait_for(c.closed.wait(), 3)
        assert any("idle timeout" in e for e in c.got.errors)
    async with fake_server(limits=proto.Limits(session_timeout_s=1.0)) as (base, _, _):
        c = await ProtocolClient(base).connect()
        talk = asyncio.create_task(c.speak(np.zeros(24000 * 3, np.float32)))
        await asyncio.wait_for(c.closed.wait(), 3)
        await talk
        assert any("session time limit" in e for e in c.got.errors)
        assert 10 <= c.got.pages <= 16


async def test_recording_is_stereo_and_flushed_while_the_session_runs(tmp_path):
    async with fake_server(record_dir=tmp_path) as (base, _, _):
        c = await ProtocolClient(base).connect()
        await c.speak(question(tail_s=1.6))
        wavs = list(tmp_path.glob("*.wav"))
        assert len(wavs) == 1
        mid = sf.info(str(wavs[0])).frames
        assert mid >= 24000 * 1.5, "the wav is flushed about every second while the session runs"
        lines = (tmp_path / wavs[0].name.replace(".wav", ".timeline.jsonl")).read_text().splitlines()
        assert any(json.loads(x).get("event", {}).get("kind") == "final" for x in lines)
        await c.close()
        await asyncio.sleep(0.3)
    data, rate = sf.read(str(wavs[0]))
    assert rate == 24000 and data.shape[1] == 2
    user, assistant = data[:, 0], data[:, 1]
    loud_user = np.flatnonzero(np.abs(user) > 0.05)
    loud_asst = np.flatnonzero(np.abs(assistant) > 0.05)
    assert len(loud_user) and len(loud_asst)
    assert loud_asst[0] > loud_user[-1], "the assistant answers after the question, on the right channel"
    tl = json.loads((tmp_path / wavs[0].name.replace(".wav", ".timeline.json")).read_text())
    assert tl["meta"]["pace"] == "live" and len(tl["frames"]["t"]) == len(data) // FRAME_SAMPLES


def own_threads() -> list[str]:
    """Threads other than bounded pools that keep their workers: the event loop's default executor and the
    hub's two chore threads (`Hub.off_loop`)."""
    return sorted(t.name for t in threading.enumerate() if not t.name.startswith(("asyncio_", "tandem-chores")))


@pytest.mark.parametrize("mode", ["tandem", "cascade"])
async def test_100_connect_disconnect_cycles_leak_nothing(mode):
    async with fake_server(mode=mode, max_sessions=4) as (base, hub, listener):
        async def cycle(i: int) -> None:
            c = await ProtocolClient(base).connect()
            await c.speak(question(lead_s=0.0, speech_s=0.16, tail_s=0.0))
            if i % 2:  # vanish mid-sentence without a close handshake
                c.ws._response.connection.transport.abort()
                await asyncio.gather(c._recv, return_exceptions=True)
                await c._http.close()
            else:
                await c.close()

        async def drained() -> None:  # the server notices a vanished client a moment later
            for _ in range(100):
                if hub.active == 0:
                    return
                await asyncio.sleep(0.02)

        for i in range(4):  # warm up anything created once (pools, threads of the test client)
            await cycle(i)
        await drained()
        for _ in range(50):
            await asyncio.sleep(0.1)
            if not [t for t in threading.enumerate() if t.name == "voicer"]:
                break
        threads0, fds0 = own_threads(), len(os.listdir("/proc/self/fd"))
        voicers0 = {t for t in threading.enumerate() if t.name == "voicer"}  # another test's, if any: not ours
        for batch in range(25):
            await asyncio.gather(*(cycle(4 * batch + j) for j in range(4)))
            await drained()
        for _ in range(50):  # a closed session's voice thread ends on its own a moment later (slower on a busy machine)
            await asyncio.sleep(0.1)
            voicers = [t for t in threading.enumerate() if t.name == "voicer" and t not in voicers0]
            if not voicers and own_threads() <= threads0:
                break
        threads1, fds1 = own_threads(), len(os.listdir("/proc/self/fd"))
        st = hub.status()
    print(f"{mode}: threads {threads0} -> {threads1}, fds {fds0} -> {fds1}, listener streams {listener.streams}")
    assert st["sessions"] == 0 and st["reserved"] == 0 and hub.sessions_total == 104
    assert listener.opened == 104 and listener.closed == 104 and listener.streams == 0
    assert threads1 == threads0, (threads0, threads1)
    assert not voicers
    assert fds1 <= fds0 + 2, (fds0, fds1)


async def test_all_live_sessions_are_stepped_in_one_front_end_call_per_tick():
    async with fake_server() as (base, hub, _):
        inner = hub.backend.front_ends
        sizes: list[int] = []

        class Counting:
            name = "counting"

            def open(self, tts):  # noqa: ANN001
                return inner.open(tts)

            def step_many(self, fes, users, tokens):  # noqa: ANN001
                sizes.append(len(fes))
                return inner.step_many(fes, users, tokens)

        hub.backend.front_ends = Counting()
        clients = [await ProtocolClient(base).connect() for _ in range(3)]
        await asyncio.gather(*(c.speak(np.zeros(24000, np.float32)) for c in clients))
        ticks = hub.ticks
        for c in clients:
            await c.close()
    assert sizes.count(3) >= 10, "three live sessions, one call"
    assert len(sizes) <= ticks


async def test_load_generator_reports_onsets_and_frame_health_per_session():
    from fakes import FakeTranscriber
    from tandem.server.loadtest import run_clients, score_answers, summarize, verdict

    async with fake_server(max_sessions=3) as (base, _, _):
        reports, status = await run_clients(base, 3, 5.0, [question(tail_s=1.5)], stagger_s=0.2)
    score_answers(reports, [["paris"]], FakeTranscriber())
    s = summarize(reports, status)
    assert s["answers_judged"] == s["turns"] and s["answered_pct"] == 100.0, "what came back holds the answer"
    assert 0 < s["answer_heard_median_s"] < 4.0 and s["onset_client_p95_s"] >= s["onset_client_median_s"]
    score_answers(reports, [["london"]], FakeTranscriber())
    assert summarize(reports, status)["answered_pct"] == 0.0
    assert not verdict(summarize(reports, status))["pass"]
    assert s["sessions"] == 3 and s["turns"] >= 3 and s["unanswered"] == 0 and s["errors"] == 0
    assert all(r.onsets_client_s and r.onsets_server_s for r in reports)
    assert 0.3 < s["onset_server_median_s"] < 1.2 and 0.3 < s["onset_client_median_s"] < 1.5
    assert s["deadline_misses"] <= MISSES_OK and s["frames"] > 60
    assert status["sessions_total"] == 3
    # the fake LLM's reply, or, once it has been seen to answer soon for another session, the restated
    # opening said short and spliced with it (the sessions share the LLM's times to first token)
    assert all(r.said.startswith(("The answer is Paris.", "It is Paris.")) for r in reports), [r.said for r in reports]


@pytest.mark.parametrize("args, expect", [
    (["--host", "0.0.0.0"], "without --token"),
    (["--host", "0.0.0.0", "--token", "short"], "at least 8 characters"),
    (["--host", "no-such-host.invalid", "--token", "long-enough"], "cannot listen on no-such-host.invalid"),
    (["--max-sessions", "0"], "--max-sessions must be between"),
    (["--idle-timeout", "0"], "must be positive"),
    (["--llm-url", "http://no-such-llm.invalid/v1"], "the LLM host 'no-such-llm.invalid' of --llm-url"),
    ("busy", "Address already in use"),
])
def test_serve_refuses_bad_settings_at_once_with_one_line(args, expect):
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        if args == "busy":
            args = ["--port", str(busy.getsockname()[1])]
        r = subprocess.run([sys.executable, "-m", "tandem", "serve", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tandem: error:") and expect in lines[0], r.stderr


def test_loadtest_counts_either_llm_engine_as_the_llm():
    from tandem.server.loadtest import CpuMeter

    class FakeProc:
        def __init__(self, cmd: str) -> None:
            self.cmd = cmd.split()

        def cmdline(self) -> list[str]:
            return self.cmd

    role = CpuMeter._role
    assert role(FakeProc("/x/.venv/bin/llama-server -m m.gguf -np 4"), False, False) == "llm"
    assert role(FakeProc("python -c from multiprocessing.spawn import spawn_main"), False, False) == "listener+voice"
    assert role(FakeProc("python -m tandem serve"), False, True) == "server"


def test_the_loadtests_cpu_report_says_what_the_hypervisor_took():
    from tandem.server.loadtest import CpuMeter

    import time

    meter = CpuMeter(None)
    t_end = time.thread_time() + 0.1
    while time.thread_time() < t_end:
        pass
    got = meter.report()
    assert got["steal_cores"] >= 0.0 and got["others_cores"] >= 0.0 and got["ours_cores"] > 0.0


def test_the_loadtests_server_is_never_held_up_by_its_own_log(tmp_path):
    """A server that logs a fault over and over writes far more than a pipe holds (64 KiB): unread, its
    next write blocks and its frame loop with it. The loadtest reads it as it comes, counts the errors
    and keeps the last lines."""
    import subprocess
    import sys

    from tandem.server.loadtest import ServerLog

    chatty = ("import sys\n"
              "for i in range(20000): print(f'asyncio ERROR Exception in callback {i}', file=sys.stderr)\n"
              "print('serving on http://127.0.0.1:1/ (done)', flush=True)\n"
              "for i in range(5000): print(f'out {i}')\n")
    proc = subprocess.Popen([sys.executable, "-c", chatty], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = ServerLog(proc, tmp_path / "record" / "server.log")  # --record's folder, made by the server later
    assert "serving on" in proc.stdout.readline()
    log.drain_too(proc.stdout)
    assert proc.wait(timeout=30) == 0, "the server wrote everything without waiting for a reader"
    log.close()
    assert log.errors == 20000
    assert len(log.tail) == 40 and ("out 4999" in log.tail or "asyncio ERROR Exception in callback 19999" in log.tail)
    kept = (tmp_path / "record" / "server.log").read_text().splitlines()
    assert len(kept) == 25000 and "out 4999" in kept and "asyncio ERROR Exception in callback 19999" in kept


def test_the_default_sessions_are_the_capacity_recorded_in_the_results():
    """`make capacity`'s recorded sweep (docs/capacity.json) and the default cannot drift apart unnoticed."""
    import json
    from pathlib import Path

    from tandem.server.capacity import DEFAULT_MAX_SESSIONS

    sweep = json.loads((Path(__file__).parents[1] / "docs" / "capacity.json").read_text())
    assert sweep["args"]["server_args"] == [], "measured on `tandem serve` with no flags"
    assert DEFAULT_MAX_SESSIONS == sweep["capacity"]
