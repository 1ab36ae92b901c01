package vad

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/replyd/replyd/internal/f32"
)

// The Silero VAD v5 network at 16 kHz, as its ONNX graph computes it (the
// then-branch of the graph's If on sr == 16000):
//
//  1. input: 64 samples of context (the end of the previous window's input,
//     zeros at first) followed by the 512 new samples: 576 samples;
//  2. STFT as a convolution: reflection-pad 64 samples on the right (Pad,
//     mode reflect, pads [0 0 0 64]) to 640, convolve with the 258×256
//     forward basis at stride 128 (4 frames); the magnitude of the 129
//     real/imaginary pairs is sqrt(re² + im²);
//  3. encoder: four Conv1d (kernel 3, padding 1, strides 1, 2, 2, 1), each
//     followed by ReLU: 129×4 → 128×4 → 64×2 → 64×1 → 128×1;
//  4. decoder: one LSTM cell step (hidden 128, PyTorch gate order i, f, g, o;
//     the graph reorders the rows to ONNX's i, o, f, c) from the carried
//     state (h, c), then ReLU, a 1×1 Conv1d to one channel, Sigmoid, and the
//     mean over the single time step;
//  5. output: the speech probability and the new state [h, c] ([2,1,128]).

// Window geometry at 16 kHz.
const (
	SampleRate     = 16000
	WindowSamples  = 512 // new samples per call: 32 ms
	ContextSamples = 64  // samples of the previous window the model sees again
	hidden         = 128
	nFreq          = 129 // STFT bins: filter length 256 / 2 + 1
	filterLen      = 256
	hop            = 128
	padRight       = 64
	inputLen       = ContextSamples + WindowSamples // 576
	nFrames        = (inputLen+padRight-filterLen)/hop + 1
)

// conv1d is one encoder convolution: weights [out][in][3], bias [out].
type conv1d struct {
	w, b    []float32
	in, out int
	stride  int
}

// Model holds Silero VAD v5's 16 kHz weights. It is read-only after Load
// and safe for concurrent use; each call carries its own state.
type Model struct {
	path  string
	basis []float32 // [2·nFreq][filterLen]
	enc   [4]conv1d
	wih   []float32 // [4·hidden][hidden], rows i, f, g, o
	whh   []float32 // [4·hidden][hidden]
	bih   []float32 // [4·hidden]
	bhh   []float32 // [4·hidden]
	decW  []float32 // [hidden]
	decB  float32
}

// Load reads Silero VAD v5 from its ONNX file (as @ricky0123/vad-web ships
// it as dist/silero_vad_v5.onnx, or as snakers4/silero-vad ships it). It
// checks that the graph computes what this package computes (the If on the
// sample rate, the STFT convolution's geometry, the encoder's strides and
// padding, the LSTM's size) and refuses any other file with an error that
// names it.
func Load(path string) (*Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("vad: %w", err)
	}
	m, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("vad: %s: %w", path, err)
	}
	m.path = path
	return m, nil
}

// Path is the file the model was loaded from.
func (m *Model) Path() string { return m.path }

// parse builds a Model from the bytes of an ONNX file.
func parse(b []byte) (*Model, error) {
	om, err := parseModel(b)
	if err != nil {
		return nil, err
	}
	br, err := branch16k(om.graph)
	if err != nil {
		return nil, err
	}
	consts := map[string]*tensor{}
	collect(br, consts)
	get := func(name string, dims ...int) ([]float32, error) {
		t := consts[name]
		if t == nil {
			return nil, fmt.Errorf("%w: no tensor %s in the 16 kHz branch", errFormat, name)
		}
		if !slices.Equal(t.dims, dims) || len(t.f) != t.size() {
			return nil, fmt.Errorf("%w: tensor %s has shape %v, want float %v", errFormat, name, t.dims, dims)
		}
		return t.f, nil
	}
	m := &Model{}
	var errs []error
	must := func(v []float32, err error) []float32 {
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	m.basis = must(get("stft.forward_basis_buffer", 2*nFreq, 1, filterLen))
	ins := [4]int{nFreq, hidden, 64, 64}
	outs := [4]int{hidden, 64, 64, hidden}
	strides := [4]int{1, 2, 2, 1}
	for i := range m.enc {
		p := fmt.Sprintf("encoder.%d.reparam_conv.", i)
		m.enc[i] = conv1d{w: must(get(p+"weight", outs[i], ins[i], 3)), b: must(get(p+"bias", outs[i])),
			in: ins[i], out: outs[i], stride: strides[i]}
	}
	m.wih = must(get("decoder.rnn.weight_ih", 4*hidden, hidden))
	m.whh = must(get("decoder.rnn.weight_hh", 4*hidden, hidden))
	m.bih = must(get("decoder.rnn.bias_ih", 4*hidden))
	m.bhh = must(get("decoder.rnn.bias_hh", 4*hidden))
	m.decW = must(get("decoder.decoder.2.weight", 1, hidden, 1))
	if db := must(get("decoder.decoder.2.bias", 1)); db != nil {
		m.decB = db[0]
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	if err := checkGraph(br, consts); err != nil {
		return nil, err
	}
	return m, nil
}

// branch16k returns the then-branch of the top-level If whose condition is
// Equal(sr, 16000).
func branch16k(g *onnxGraph) (*onnxGraph, error) {
	eq := map[string]bool{} // outputs of Equal(sr, 16000)
	consts := map[string]*tensor{}
	for _, n := range g.nodes {
		if n.op == "Constant" && n.attrs["value"] != nil && n.attrs["value"].t != nil && len(n.outputs) == 1 {
			consts[n.outputs[0]] = n.attrs["value"].t
		}
	}
	for name, t := range g.inits {
		consts[name] = t
	}
	for _, n := range g.nodes {
		if n.op == "Equal" && len(n.inputs) == 2 && n.inputs[0] == "sr" {
			if c := consts[n.inputs[1]]; c != nil && len(c.i) == 1 && c.i[0] == SampleRate {
				eq[n.outputs[0]] = true
			}
		}
	}
	for _, n := range g.nodes {
		if n.op == "If" && len(n.inputs) == 1 && eq[n.inputs[0]] && n.attrs["then_branch"] != nil && n.attrs["then_branch"].g != nil {
			return n.attrs["then_branch"].g, nil
		}
	}
	return nil, fmt.Errorf("%w: no If on sr == 16000", errFormat)
}

// collect gathers the tensors of g and its subgraphs (initializers and
// Constant nodes) by name, with the inlining prefix that exporters add
// ("If_0_then_branch__Inline_0__") removed.
func collect(g *onnxGraph, into map[string]*tensor) {
	for name, t := range g.inits {
		into[stripPrefix(name)] = t
	}
	for _, n := range g.nodes {
		if n.op == "Constant" && n.attrs["value"] != nil && n.attrs["value"].t != nil && len(n.outputs) == 1 {
			into[stripPrefix(n.outputs[0])] = n.attrs["value"].t
		}
		for _, a := range n.attrs {
			if a.g != nil {
				collect(a.g, into)
			}
		}
	}
}

func stripPrefix(name string) string {
	if i := strings.Index(name, "_Inline_0__"); i >= 0 {
		return name[i+len("_Inline_0__"):]
	}
	return name
}

// checkGraph verifies the operations whose attributes this package builds
// in: the reflection padding, the STFT and encoder convolutions, the LSTM.
func checkGraph(g *onnxGraph, consts map[string]*tensor) error {
	var nodes []*onnxNode
	var walkNodes func(*onnxGraph)
	walkNodes = func(g *onnxGraph) {
		for _, n := range g.nodes {
			nodes = append(nodes, n)
			for _, a := range n.attrs {
				if a.g != nil {
					walkNodes(a.g)
				}
			}
		}
	}
	walkNodes(g)
	seen := map[string]bool{}
	for _, n := range nodes {
		switch n.op {
		case "Pad":
			if a := n.attrs["mode"]; a == nil || string(a.s) != "reflect" {
				return fmt.Errorf("%w: STFT padding is not reflect", errFormat)
			}
			if c := consts["/stft/padding/Constant_1_output_0"]; c == nil || !slices.Equal(c.i, []int64{0, padRight}) {
				return fmt.Errorf("%w: STFT padding is not 64 samples on the right", errFormat)
			}
			seen["pad"] = true
		case "Conv":
			if len(n.inputs) < 2 {
				continue
			}
			w := stripPrefix(n.inputs[1])
			ints := func(k string) []int64 {
				if a := n.attrs[k]; a != nil {
					return a.ints
				}
				return nil
			}
			switch {
			case w == "stft.forward_basis_buffer":
				if !slices.Equal(ints("kernel_shape"), []int64{filterLen}) || !slices.Equal(ints("strides"), []int64{hop}) {
					return fmt.Errorf("%w: STFT convolution is not kernel 256, stride 128", errFormat)
				}
				seen["stft"] = true
			case strings.HasPrefix(w, "encoder.") && strings.HasSuffix(w, ".reparam_conv.weight"):
				var i int
				if _, err := fmt.Sscanf(w, "encoder.%d.", &i); err != nil || i < 0 || i > 3 {
					return fmt.Errorf("%w: unexpected convolution %s", errFormat, w)
				}
				want := []int64{int64([4]int{1, 2, 2, 1}[i])}
				if !slices.Equal(ints("strides"), want) || !slices.Equal(ints("pads"), []int64{1, 1}) ||
					!slices.Equal(ints("kernel_shape"), []int64{3}) {
					return fmt.Errorf("%w: encoder convolution %d has other strides or padding", errFormat, i)
				}
				seen[w] = true
			}
		case "LSTM":
			if a := n.attrs["hidden_size"]; a == nil || a.i != hidden {
				return fmt.Errorf("%w: LSTM hidden size is not 128", errFormat)
			}
			seen["lstm"] = true
		}
	}
	for _, k := range []string{"pad", "stft", "lstm", "encoder.0.reparam_conv.weight", "encoder.1.reparam_conv.weight",
		"encoder.2.reparam_conv.weight", "encoder.3.reparam_conv.weight"} {
		if !seen[k] {
			return fmt.Errorf("%w: the 16 kHz branch has no %s", errFormat, k)
		}
	}
	return nil
}

// State is what Silero carries from one window to the next: the LSTM's
// hidden and cell vectors (the model's "state" input, [2,1,128]) and the
// last 64 samples of the previous window's input. The zero State is the
// start of a stream.
type State struct {
	h, c [hidden]float32
	ctx  [ContextSamples]float32
}

// Prob runs one window: window must hold WindowSamples samples. It returns
// the speech probability and advances st, as one call of the ONNX model
// with input = context ‖ window, state = [h, c], sr = 16000 does.
func (m *Model) Prob(st *State, window []float32) float32 {
	var in [inputLen]float32
	copy(in[:ContextSamples], st.ctx[:])
	copy(in[ContextSamples:], window[:WindowSamples])
	var feat [hidden]float32
	m.features(&in, &feat)
	p := m.step(st, &feat)
	copy(st.ctx[:], in[WindowSamples:])
	return p
}

// Probs returns one speech probability per 512-sample window of pcm, from
// a fresh state, the last window zero-padded as whisper.cpp pads it
// (whisper_vad_detect_speech_no_reset). Everything before the LSTM depends
// only on the samples, so it runs on all cores; the LSTM steps run in order.
func (m *Model) Probs(pcm []float32) []float32 {
	n := (len(pcm) + WindowSamples - 1) / WindowSamples
	feats := make([][hidden]float32, n)
	workers := min(runtime.GOMAXPROCS(0), max(1, n/32))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * n / workers; i < (w+1)*n/workers; i++ {
				var in [inputLen]float32
				lo := i*WindowSamples - ContextSamples
				for k := range in {
					if j := lo + k; j >= 0 && j < len(pcm) {
						in[k] = pcm[j]
					}
				}
				m.features(&in, &feats[i])
			}
		}()
	}
	wg.Wait()
	probs := make([]float32, n)
	var st State
	for i := range feats {
		probs[i] = m.step(&st, &feats[i])
	}
	return probs
}

// features computes the STFT magnitude and the encoder for one 576-sample
// input: the 128 values the LSTM reads.
func (m *Model) features(in *[inputLen]float32, out *[hidden]float32) {
	var padded [inputLen + padRight]float32
	copy(padded[:], in[:])
	for j := range padRight {
		padded[inputLen+j] = in[inputLen-2-j] // reflect: the edge sample is not repeated
	}
	// STFT magnitude, [nFreq][nFrames].
	mag := make([]float32, nFreq*nFrames)
	for f := range nFreq {
		re := m.basis[f*filterLen : (f+1)*filterLen]
		im := m.basis[(nFreq+f)*filterLen : (nFreq+f+1)*filterLen]
		for t := range nFrames {
			x := padded[t*hop : t*hop+filterLen]
			r, i := f32.Dot(re, x), f32.Dot(im, x)
			mag[f*nFrames+t] = float32(math.Sqrt(float64(r*r + i*i)))
		}
	}
	x, L := mag, nFrames
	for _, c := range m.enc {
		x, L = c.apply(x, L)
	}
	copy(out[:], x) // 128 channels × 1 step
}

// apply runs the convolution (padding 1) and ReLU on x ([in][L]) and
// returns [out][L'] and L'. Each output step is the dot product of a kernel
// row ([in][3]) with the input column it covers.
func (c conv1d) apply(x []float32, L int) ([]float32, int) {
	lo := (L+2-3)/c.stride + 1
	y := make([]float32, c.out*lo)
	col := make([]float32, c.in*3)
	for t := range lo {
		for i := range c.in {
			for k := range 3 {
				var v float32
				if p := t*c.stride + k - 1; p >= 0 && p < L {
					v = x[i*L+p]
				}
				col[i*3+k] = v
			}
		}
		for o := range c.out {
			y[o*lo+t] = max(f32.Dot(c.w[o*c.in*3:(o+1)*c.in*3], col)+c.b[o], 0)
		}
	}
	return y, lo
}

// step runs the LSTM cell and the decoder on the encoder output x.
func (m *Model) step(st *State, x *[hidden]float32) float32 {
	var gates [4 * hidden]float32
	for g := range gates {
		gates[g] = f32.Dot(m.wih[g*hidden:(g+1)*hidden], x[:]) + m.bih[g] + f32.Dot(m.whh[g*hidden:(g+1)*hidden], st.h[:]) + m.bhh[g]
	}
	var out float64 = float64(m.decB)
	for k := range hidden {
		i := sigmoid(gates[k])
		f := sigmoid(gates[hidden+k])
		g := float32(math.Tanh(float64(gates[2*hidden+k])))
		o := sigmoid(gates[3*hidden+k])
		c := f*st.c[k] + i*g
		h := o * float32(math.Tanh(float64(c)))
		st.c[k], st.h[k] = c, h
		out += float64(m.decW[k]) * float64(max(h, 0))
	}
	return sigmoid(float32(out))
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }
