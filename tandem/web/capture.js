// AudioWorklet: hands the microphone's samples (at the context's rate) to the page in 20 ms blocks.
class Capture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.block = new Float32Array(Math.round(sampleRate / 50));
    this.n = 0;
  }
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (ch) {
      for (let i = 0; i < ch.length; i++) {
        this.block[this.n++] = ch[i];
        if (this.n === this.block.length) {
          this.port.postMessage(this.block.slice(0));
          this.n = 0;
        }
      }
    }
    return true;
  }
}
registerProcessor("tandem-capture", Capture);
