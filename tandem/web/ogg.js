// Ogg-Opus framing for the browser (RFC 7845): WebCodecs gives raw Opus packets; Moshi's protocol
// carries Ogg pages. A muxer (one packet per page) and a streaming demuxer; no build step.
"use strict";

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let r = i << 24;
    for (let j = 0; j < 8; j++) r = (r & 0x80000000) ? ((r << 1) ^ 0x04c11db7) : (r << 1);
    t[i] = r >>> 0;
  }
  return t;
})();

function oggCrc(bytes) {
  let crc = 0;
  for (let i = 0; i < bytes.length; i++) crc = ((crc << 8) ^ CRC_TABLE[((crc >>> 24) ^ bytes[i]) & 0xff]) >>> 0;
  return crc;
}

class OggOpusMuxer {
  constructor(sampleRate, channels = 1) {
    this.sampleRate = sampleRate;
    this.channels = channels;
    this.serial = (Math.random() * 0xffffffff) >>> 0;
    this.seq = 0;
    this.granule = 0; // in 48 kHz samples, whatever the input rate (RFC 7845)
    this.preSkip = 312; // libopus' usual encoder delay at 48 kHz
  }

  _page(packet, headerType, granule) {
    const lacing = [];
    let n = packet.length;
    while (n >= 255) { lacing.push(255); n -= 255; }
    lacing.push(n);
    const page = new Uint8Array(27 + lacing.length + packet.length);
    const v = new DataView(page.buffer);
    page.set([0x4f, 0x67, 0x67, 0x53], 0); // "OggS"
    page[4] = 0;
    page[5] = headerType;
    v.setUint32(6, granule % 0x100000000, true);
    v.setUint32(10, Math.floor(granule / 0x100000000), true);
    v.setUint32(14, this.serial, true);
    v.setUint32(18, this.seq++, true);
    v.setUint32(22, 0, true);
    page[26] = lacing.length;
    page.set(lacing, 27);
    page.set(packet, 27 + lacing.length);
    v.setUint32(22, oggCrc(page), true);
    return page;
  }

  headers() {
    const head = new Uint8Array(19);
    const hv = new DataView(head.buffer);
    head.set(new TextEncoder().encode("OpusHead"), 0);
    head[8] = 1;
    head[9] = this.channels;
    hv.setUint16(10, this.preSkip, true);
    hv.setUint32(12, this.sampleRate, true);
    hv.setInt16(16, 0, true);
    head[18] = 0;
    const vendor = new TextEncoder().encode("tandem-web");
    const tags = new Uint8Array(8 + 4 + vendor.length + 4);
    const tv = new DataView(tags.buffer);
    tags.set(new TextEncoder().encode("OpusTags"), 0);
    tv.setUint32(8, vendor.length, true);
    tags.set(vendor, 12);
    tv.setUint32(12 + vendor.length, 0, true);
    return [this._page(head, 2, 0), this._page(tags, 0, 0)];
  }

  page(packet, durationUs) {
    this.granule += Math.round(durationUs * 48000 / 1e6);
    return this._page(packet, 0, this.granule);
  }
}

class OggDemuxer {
  // Feed it bytes as they come; it calls onPacket(packet) for each complete audio packet.
  constructor(onPacket) {
    this.onPacket = onPacket;
    this.buf = new Uint8Array(0);
    this.partial = [];
  }

  push(bytes) {
    const merged = new Uint8Array(this.buf.length + bytes.length);
    merged.set(this.buf, 0);
    merged.set(bytes, this.buf.length);
    this.buf = merged;
    let off = 0;
    while (this.buf.length - off >= 27) {
      if (!(this.buf[off] === 0x4f && this.buf[off + 1] === 0x67 && this.buf[off + 2] === 0x67 && this.buf[off + 3] === 0x53)) {
        off++; // resynchronise on the next capture pattern
        continue;
      }
      const nseg = this.buf[off + 26];
      const headerLen = 27 + nseg;
      if (this.buf.length - off < headerLen) break;
      let dataLen = 0;
      for (let i = 0; i < nseg; i++) dataLen += this.buf[off + 27 + i];
      if (this.buf.length - off < headerLen + dataLen) break;
      let p = off + headerLen;
      for (let i = 0; i < nseg; i++) {
        const len = this.buf[off + 27 + i];
        this.partial.push(this.buf.subarray(p, p + len));
        p += len;
        if (len < 255) this._emit();
      }
      off += headerLen + dataLen;
    }
    this.buf = this.buf.slice(off);
  }

  _emit() {
    const n = this.partial.reduce((a, c) => a + c.length, 0);
    const packet = new Uint8Array(n);
    let o = 0;
    for (const c of this.partial) { packet.set(c, o); o += c.length; }
    this.partial = [];
    const magic = new TextDecoder().decode(packet.subarray(0, 8));
    if (magic === "OpusHead" || magic === "OpusTags") return;
    if (n > 0) this.onPacket(packet);
  }
}
