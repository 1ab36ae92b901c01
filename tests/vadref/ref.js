// Reference speech probabilities for engine/vad's tests, computed by ONNX
// Runtime on the Silero VAD ONNX file the way Silero's own wrapper calls it:
// each 512-sample window is prefixed by the last 64 samples of the previous
// input (zeros at first), the state [2,1,128] is carried from call to call,
// sr = 16000, and the last partial window is zero-padded.
//
// usage: node ref.js MODEL.onnx IN.f32 OUT.json
//   IN.f32: little-endian float32 samples; OUT.json: array of probabilities.
'use strict';
const ort = require('onnxruntime-node');
const fs = require('fs');

async function main() {
  const [model, inPath, outPath] = process.argv.slice(2);
  const buf = fs.readFileSync(inPath);
  const pcm = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1 });
  const sr = new ort.Tensor('int64', BigInt64Array.from([16000n]), []);
  let state = new Float32Array(2 * 128);
  let context = new Float32Array(64);
  const probs = [];
  for (let i = 0; i < pcm.length; i += 512) {
    const x = new Float32Array(576);
    x.set(context, 0);
    x.set(pcm.subarray(i, Math.min(i + 512, pcm.length)), 64);
    const out = await session.run({
      input: new ort.Tensor('float32', x, [1, 576]),
      state: new ort.Tensor('float32', state, [2, 1, 128]),
      sr,
    });
    probs.push(out.output.data[0]);
    state = Float32Array.from(out.stateN.data);
    context = x.slice(512);
  }
  fs.writeFileSync(outPath, JSON.stringify(probs));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
