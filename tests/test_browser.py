"""The browser client in a real headless Chromium (Debian's `chromium`, driven by Playwright), with a
fake microphone playing a wav: WebCodecs Opus and Ogg framing in the page, the protocol, the lanes,
and playback. The fast test runs the page against fakes; the slow one against the real stack."""
from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tandem.audio.frames import SAMPLE_RATE, resample
from test_server_support import QUESTION_TEXT, fake_server, question

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "out" / "test-artifacts"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)")


def fake_mic_wav(path: Path, audio: np.ndarray) -> str:
    """Chromium's fake capture device reads 16-bit PCM wav; %noloop plays it once, then silence."""
    sf.write(str(path), resample(audio, SAMPLE_RATE, 48000), 48000, subtype="PCM_16")
    return f"{path}%noloop"


async def run_page(url: str, mic: str, seconds: float, shot: str, until=None) -> dict:  # noqa: ANN001
    """Open the page, press Start, and watch it for up to `seconds` (or until `until(state, lanes)`);
    the screenshot is kept in out/test-artifacts/`shot`."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=[
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={mic}", "--autoplay-policy=no-user-gesture-required",
            "--no-sandbox"])
        try:
            page = await browser.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda e: problems.append(str(e)))
            await page.goto(url)
            await page.click("#start")
            deadline = time.monotonic() + seconds
            state = {}
            while time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                state = await page.evaluate("window.tandem")
                lanes = {k: await page.inner_text("#" + k)
                         for k in ("partial", "final", "retrieval", "oracle", "assistant", "turns")}
                if until is not None and until(state, lanes):
                    break
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
            await page.click("#start")  # stop
            await asyncio.sleep(0.3)
            return {"state": state, "lanes": lanes, "problems": problems, "screenshot": ARTIFACTS / shot,
                    "status": await page.inner_text("#status")}
        finally:
            await browser.close()


@pytest.mark.parametrize("capture", ["", "device"])
async def test_browser_client_talks_to_the_server_with_fakes_behind_it(tmp_path, capture):
    """capture=device: the microphone is captured at the device's rate and resampled to 24 kHz in
    the page (what browsers that cannot capture into a 24 kHz context get)."""
    mic = fake_mic_wav(tmp_path / "q.wav", question(lead_s=0.5, speech_s=1.0, tail_s=6.0))
    # the LLM goes on from the restated opening, so what is said does not hang on whether the fake LLM's
    # reply comes before the front-end has begun the opening (a loaded CI machine once heard "The capital
    # The answer is Paris." from a reply that replaced the opening)
    async with fake_server(llm_tokens=[" Paris", "."], llm_continues=True) as (base, hub, listener):
        url = base + "/" + (f"?capture={capture}" if capture else "")
        res = await run_page(url, mic, 15, f"browser-fakes{'-' + capture if capture else ''}.png", until=lambda s, lanes: s["playedAudibleS"] > 0.5 and lanes["turns"])
        await asyncio.sleep(0.5)
        assert hub.status()["sessions"] == 0, "Stop closes the session"
    st, lanes = res["state"], res["lanes"]
    assert not res["problems"] and not st["errors"], (res["problems"], st["errors"])
    assert st["pagesOut"] > 20, "the page sends Ogg-Opus pages the server can decode"
    assert lanes["final"] == QUESTION_TEXT  # the fake Listener heard the (fake) microphone end a turn
    assert lanes["oracle"] == "The capital of France is Paris."
    assert lanes["assistant"].split() == ["The", "capital", "of", "France", "is", "Paris."]
    assert st["playedAudibleS"] > 0.3, "the answer's audio was played"
    assert re.search(r"1\s+\d\.\d\d s", lanes["turns"]), lanes["turns"]
    assert res["screenshot"].exists()


async def test_the_page_shows_each_search_of_the_users_documents(tmp_path):
    from tandem.knowledge import KnowledgeBase

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "france.md").write_text("# Facts\n\n## France\nThe capital of France is Paris, on the Seine.\n")
    kb = KnowledgeBase.open(docs, tmp_path / "index.sqlite", progress=False)
    mic = fake_mic_wav(tmp_path / "q.wav", question(lead_s=0.5, speech_s=1.0, tail_s=6.0))
    try:
        async with fake_server(knowledge=kb) as (base, hub, listener):
            res = await run_page(base + "/", mic, 15, "browser-knowledge.png",
                                 until=lambda s, lanes: "France" in lanes["retrieval"] and lanes["oracle"])
    finally:
        kb.close()
    assert not res["problems"] and not res["state"]["errors"], (res["problems"], res["state"]["errors"])
    lane = res["lanes"]["retrieval"]
    assert lane.startswith(f'searched "{QUESTION_TEXT}"') and "Facts: France" in lane, lane
    assert "answered from the documents" in lane, "the document's sentence answered outright"
    assert "Paris" in res["lanes"]["oracle"]


@pytest.mark.slow
def test_browser_client_on_the_real_stack(tmp_path):
    from tandem.llm.local_server import free_port
    from tandem.audio.voices import speak

    mic = fake_mic_wav(tmp_path / "q.wav", speak("What is the capital of France?", "festival", lead_s=1.0, tail_s=8.0))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tandem", "serve", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert "serving on" in line, server.stderr.read()
        res = asyncio.run(run_page(f"http://127.0.0.1:{port}/", mic, 25, "browser-real-stack.png",
                                   until=lambda s, lanes: s["playedAudibleS"] > 1.0 and lanes["turns"]
                                   and "paris" in lanes["oracle"].lower()))
    finally:
        server.terminate()
        server.wait(timeout=20)
    st, lanes = res["state"], res["lanes"]
    assert not res["problems"] and not st["errors"], (res["problems"], st["errors"])
    heard = lanes["final"].lower()
    assert "capital" in heard and "france" in heard, lanes
    assert "paris" in lanes["oracle"].lower(), lanes  # the LLM's answer reached the oracle lane
    assert lanes["assistant"].strip(), "the assistant said something"  # (the compact model garbles words, COMPACT.md)
    assert st["playedAudibleS"] > 0.5, "the answer's audio was played"
    assert re.search(r"1\s+\d\.\d\d s", lanes["turns"]), lanes["turns"]
    assert res["screenshot"].exists()
