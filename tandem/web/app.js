// The browser client: microphone -> Opus (WebCodecs) -> Ogg pages -> /api/chat (Moshi's protocol),
// and back: Ogg pages -> Opus decoder -> gapless playback. With ?events=1 the server also sends JSON
// events (kind 0x04) that fill the lanes. Plain script, no build step.
"use strict";

const RATE = 24000;
const KIND = { HANDSHAKE: 0, AUDIO: 1, TEXT: 2, META: 4, ERROR: 5 };
const $ = (id) => document.getElementById(id);

// What the page did, for people and for the end-to-end test.
window.tandem = { state: "idle", pagesOut: 0, pagesIn: 0, samplesIn: 0, audibleScheduledS: 0, playedAudibleS: 0,
                  errors: [], events: 0, turns: 0 };

let conn = null;

function setStatus(s) { window.tandem.state = s; $("status").textContent = s; }

// The token comes from the page's address: #token=... (a fragment never leaves the browser) or
// ?token=.... It is sent as the WebSocket subprotocol "tandem-token.<token>", since a browser cannot
// set an Authorization header on a WebSocket and a URL ends up in logs; a token with characters a
// subprotocol cannot carry falls back to ?token= on the WebSocket URL.
const TOKEN_PROTOCOL = "tandem-token.";
const SUBPROTOCOL_CHARS = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function pageToken() {
  const page = new URL(location.href);
  return new URLSearchParams(page.hash.slice(1)).get("token") || page.searchParams.get("token");
}

function wsTarget() {
  const url = new URL("/api/chat", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.searchParams.set("events", "1");
  const token = pageToken();
  if (token && SUBPROTOCOL_CHARS.test(token)) return { url: url.toString(), protocols: [TOKEN_PROTOCOL + token] };
  if (token) url.searchParams.set("token", token);
  return { url: url.toString(), protocols: [] };
}

class Player {
  // Schedules decoded chunks back to back on the audio clock; a small lead absorbs network jitter.
  constructor(ctx) {
    this.ctx = ctx;
    this.next = 0;
    this.lead = 0.12;
    this.gain = ctx.createGain();
    this.gain.connect(ctx.destination);
  }
  play(samples, rate) {
    const buf = this.ctx.createBuffer(1, samples.length, rate);
    buf.copyToChannel(samples, 0);
    const src = this.ctx.createBufferSource();
    src.buffer = buf;
    src.connect(this.gain);
    const now = this.ctx.currentTime;
    if (this.next < now + 0.02) this.next = now + this.lead; // ran dry (or first chunk): re-buffer
    src.start(this.next);
    let peak = 0;
    for (let i = 0; i < samples.length; i++) peak = Math.max(peak, Math.abs(samples[i]));
    const dur = samples.length / rate;
    if (peak > 0.01) {
      window.tandem.audibleScheduledS += dur;
      src.onended = () => { window.tandem.playedAudibleS += dur; };
    }
    this.next += dur;
  }
}

class Connection {
  async start() {
    if (!("AudioEncoder" in window) || !("AudioDecoder" in window)) {
      throw new Error("this browser has no WebCodecs audio (AudioEncoder/AudioDecoder); use a recent Chromium or Firefox");
    }
    setStatus("asking for the microphone");
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 } });
    this.ctx = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
    await this.ctx.resume();
    this.player = new Player(this.ctx);
    this.setupDecoder();
    setStatus("connecting");
    const target = wsTarget();
    this.ws = new WebSocket(target.url, target.protocols);
    this.ws.binaryType = "arraybuffer";
    this.ready = false;
    this.ws.onmessage = (ev) => this.onMessage(new Uint8Array(ev.data));
    this.ws.onclose = (ev) => { if (conn === this) stop(ev.reason ? `closed: ${ev.reason}` : "closed"); };
    this.ws.onerror = () => setStatus("connection error");
  }

  setupDecoder() {
    this.decoder = new AudioDecoder({
      output: (data) => {
        const n = data.numberOfFrames;
        const pcm = new Float32Array(n);
        data.copyTo(pcm, { planeIndex: 0, format: "f32-planar" });
        window.tandem.samplesIn += n;
        this.player.play(pcm, data.sampleRate);
        data.close();
      },
      error: (e) => window.tandem.errors.push(`decoder: ${e.message}`),
    });
    this.decoder.configure({ codec: "opus", sampleRate: RATE, numberOfChannels: 1 });
    this.decodeTs = 0;
    this.demux = new OggDemuxer((packet) => {
      this.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: this.decodeTs, data: packet }));
      this.decodeTs += 20000;
    });
  }

  async startMic() {
    const mux = new OggOpusMuxer(RATE, 1);
    const send = (page) => {
      if (this.ws.readyState !== WebSocket.OPEN) return;
      const msg = new Uint8Array(page.length + 1);
      msg[0] = KIND.AUDIO;
      msg.set(page, 1);
      this.ws.send(msg);
      window.tandem.pagesOut++;
    };
    mux.headers().forEach(send);
    this.encoder = new AudioEncoder({
      output: (chunk) => {
        const packet = new Uint8Array(chunk.byteLength);
        chunk.copyTo(packet);
        send(mux.page(packet, chunk.duration || 20000));
      },
      error: (e) => window.tandem.errors.push(`encoder: ${e.message}`),
    });
    this.encoder.configure({ codec: "opus", sampleRate: RATE, numberOfChannels: 1, bitrate: 32000,
                             opus: { frameDuration: 20000 } });
    // Capture in the 24 kHz playback context where the browser allows it (Chromium resamples the
    // microphone); otherwise (Firefox) in a context at the device's rate, resampled in the worklet.
    let capCtx = this.ctx;
    const forceDevice = new URL(location.href).searchParams.get("capture") === "device"; // for tests
    try {
      if (forceDevice) throw new Error("capture at the device rate");
      this.source = capCtx.createMediaStreamSource(this.stream);
    } catch (e) {
      capCtx = this.capCtx = new AudioContext({ latencyHint: "interactive" });
      await capCtx.resume();
      this.source = capCtx.createMediaStreamSource(this.stream);
    }
    await capCtx.audioWorklet.addModule("/static/capture.js");
    this.capture = new AudioWorkletNode(capCtx, "tandem-capture", { processorOptions: { targetRate: RATE } });
    let ts = 0;
    this.capture.port.onmessage = (ev) => {
      const block = ev.data;
      let peak = 0;
      for (let i = 0; i < block.length; i++) peak = Math.max(peak, Math.abs(block[i]));
      $("meter").firstElementChild.style.width = `${Math.min(100, peak * 300)}%`;
      if (this.encoder.state !== "configured") return;
      this.encoder.encode(new AudioData({ format: "f32", sampleRate: RATE, numberOfFrames: block.length,
                                          numberOfChannels: 1, timestamp: ts, data: block }));
      ts += Math.round(block.length * 1e6 / RATE);
    };
    this.source.connect(this.capture);
  }

  onMessage(msg) {
    if (!msg.length) return;
    const payload = msg.subarray(1);
    switch (msg[0]) {
      case KIND.HANDSHAKE:
        this.ready = true;
        setStatus("live: talk");
        this.startMic().catch((e) => stop(`microphone failed: ${e.message}`));
        break;
      case KIND.AUDIO:
        window.tandem.pagesIn++;
        this.demux.push(payload);
        break;
      case KIND.TEXT:
        $("assistant").textContent += new TextDecoder().decode(payload);
        break;
      case KIND.META:
        onEvent(JSON.parse(new TextDecoder().decode(payload)));
        break;
      case KIND.ERROR: {
        const text = new TextDecoder().decode(payload);
        window.tandem.errors.push(text);
        setStatus(`server: ${text}`);
        break;
      }
      default:
        break; // kinds this page does not know are ignored, as in Moshi's clients
    }
  }

  close() {
    try { this.capture && this.capture.disconnect(); } catch (e) { /* already gone */ }
    try { this.source && this.source.disconnect(); } catch (e) { /* already gone */ }
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, "bye");
    if (this.encoder && this.encoder.state !== "closed") this.encoder.close();
    if (this.decoder && this.decoder.state !== "closed") this.decoder.close();
    if (this.ctx) this.ctx.close();
    if (this.capCtx) this.capCtx.close();
  }
}

function onEvent(ev) {
  window.tandem.events++;
  switch (ev.type) {
    case "partial": $("partial").textContent = ev.text; break;
    case "final":
      if (ev.text) $("final").textContent += ($("final").textContent ? "\n" : "") + ev.text;
      $("partial").textContent = "";
      break;
    case "oracle_reset": $("oracle").textContent = ""; break;
    case "oracle": $("oracle").textContent += ($("oracle").textContent ? " " : "") + ev.text; break;
    case "retrieval": { // a search of the user's documents (--knowledge), shown above the oracle text
      const best = (ev.passages && ev.passages.length) ? ev.passages[0].title : "no passage";
      $("retrieval").textContent = `searched "${ev.query}" (${ev.trigger}, ${ev.ms} ms): ${best}`;
      break;
    }
    case "extractive": $("retrieval").textContent += " · answered from the documents"; break;
    case "assistant_text": break; // the words themselves come as Moshi text messages (0x02)
    case "latency": {
      window.tandem.turns++;
      const row = document.createElement("tr");
      const fin = ev.final_s === undefined ? "-" : `${ev.final_s.toFixed(2)} s`;
      row.innerHTML = `<td>${window.tandem.turns}</td><td>${ev.onset_s.toFixed(2)} s</td><td>${fin}</td>`;
      $("turns").appendChild(row);
      break;
    }
    case "stats":
      $("health").textContent = `frames ${ev.frames} · deadline misses ${ev.deadline_misses} · ` +
        `lateness p99 ${ev.late_p99_ms} ms · input underruns ${ev.underruns}`;
      break;
    case "error": window.tandem.errors.push(ev.error); break;
    default: break;
  }
}

function stop(why) {
  const c = conn;
  conn = null;
  if (c) c.close();
  $("start").textContent = "Start";
  $("start").classList.remove("on");
  setStatus(why || "stopped");
}

$("start").addEventListener("click", async () => {
  if (conn) { stop("stopped"); return; }
  for (const id of ["partial", "final", "retrieval", "oracle", "assistant"]) $(id).textContent = "";
  $("start").textContent = "Stop";
  $("start").classList.add("on");
  conn = new Connection();
  try {
    await conn.start();
  } catch (e) {
    window.tandem.errors.push(e.message);
    stop(`error: ${e.message}`);
  }
});
