// AudioWorklet: hands the microphone's samples to the page in 20 ms blocks at `targetRate`.
// Chromium captures straight into a 24 kHz context (no resampling here); browsers that cannot
// connect a microphone to a context at another rate than the device's (Firefox) capture at the
// device rate, and this resamples (a box filter over each output sample's span, then linear
// interpolation: enough for speech on its way to a 16 kHz recogniser).
class Capture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const target = (options && options.processorOptions && options.processorOptions.targetRate) || sampleRate;
    this.step = sampleRate / target; // input samples per output sample
    this.block = new Float32Array(Math.round(target / 50));
    this.n = 0;
    this.pos = 0; // fractional read position into the current input, carried across calls
    this.prev = 0;
  }
  emit(x) {
    this.block[this.n++] = x;
    if (this.n === this.block.length) {
      this.port.postMessage(this.block.slice(0));
      this.n = 0;
    }
  }
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (!ch) return true;
    if (this.step === 1) {
      for (let i = 0; i < ch.length; i++) this.emit(ch[i]);
      return true;
    }
    let smooth = ch;
    if (this.step >= 1.5) { // average over the span each output sample covers, against aliasing
      const w = Math.max(1, Math.floor(this.step));
      smooth = new Float32Array(ch.length);
      let acc = 0;
      for (let i = 0; i < ch.length; i++) {
        acc += ch[i] - (i >= w ? ch[i - w] : 0);
        smooth[i] = acc / Math.min(i + 1, w);
      }
    }
    // this.pos: where the next output sample lies, in input samples from this block's start;
    // index -1 is the previous block's last sample
    const at = (i) => (i < 0 ? this.prev : smooth[i]);
    while (Math.floor(this.pos) + 1 < smooth.length) {
      const i = Math.floor(this.pos);
      const a = at(i);
      this.emit(a + (at(i + 1) - a) * (this.pos - i));
      this.pos += this.step;
    }
    this.pos -= smooth.length;
    this.prev = smooth[smooth.length - 1];
    return true;
  }
}
registerProcessor("tandem-capture", Capture);
