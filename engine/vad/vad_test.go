package vad

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/replyd/replyd/internal/shareddata"
)

var (
	loadOnce sync.Once
	loaded   *Model
	loadErr  error
)

// model loads the real Silero VAD weights once (or skips; see testdata).
func model(t *testing.T) *Model {
	t.Helper()
	path := shareddata.VADModel(t)
	loadOnce.Do(func() { loaded, loadErr = Load(path) })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

// Clips the tests run the VAD on: speech from two espeak-ng voices, with
// and without noise, and recordings that hold no speech.
type clip struct {
	name   string
	pcm    []float32
	speech bool
	voice  [2]float64 // seconds where the clean voice is audible
}

// voiceBounds returns the first and last time |x| exceeds 0.02 in a clean
// clip.
func voiceBounds(pcm []float32) [2]float64 {
	first, last := -1, -1
	for i, v := range pcm {
		if math.Abs(float64(v)) > 0.02 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	return [2]float64{float64(first) / SampleRate, float64(last) / SampleRate}
}

func silence(sec float64) []float32 { return make([]float32, int(sec*SampleRate)) }

func whiteNoise(sec, amp float64) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]float32, int(sec*SampleRate))
	for i := range out {
		out[i] = float32(amp * (2*r.Float64() - 1))
	}
	return out
}

// tones is music-like: chords of three notes with harmonics, a new chord
// every 250 ms, with a short attack and decay.
func tones(sec float64) []float32 {
	out := make([]float32, int(sec*SampleRate))
	chords := [][3]float64{{261.6, 329.6, 392.0}, {293.7, 370.0, 440.0}, {329.6, 415.3, 493.9}, {349.2, 440.0, 523.3}}
	n := SampleRate / 4
	for i := range out {
		c := chords[(i/n)%len(chords)]
		k := float64(i%n) / float64(n)
		env := math.Min(1, k*20) * math.Exp(-3*k)
		var v float64
		for _, f := range c {
			for h := 1.0; h <= 3; h++ {
				v += math.Sin(2*math.Pi*f*h*float64(i)/SampleRate) / h
			}
		}
		out[i] = float32(0.08 * env * v)
	}
	return out
}

func clips(t *testing.T) []clip {
	const text = "Would you like a cup of tea with your lunch today?"
	us := shareddata.Speak(t, text, "en-us", 1, 1, 0)
	gb := shareddata.Speak(t, text, "en-gb+f3", 1, 1, 0)
	return []clip{
		{"espeak-en-us", us, true, voiceBounds(us)},
		{"espeak-en-gb-female", gb, true, voiceBounds(gb)},
		{"espeak-en-us-noise", shareddata.Speak(t, text, "en-us", 1, 1, 0.02), true, voiceBounds(us)},
		{"silence", silence(3), false, [2]float64{}},
		{"white-noise", whiteNoise(3, 0.1), false, [2]float64{}},
		{"tones", tones(3), false, [2]float64{}},
	}
}

// reference runs ONNX Runtime on pcm through tests/vadref/ref.js.
func reference(t *testing.T, pcm []float32) []float32 {
	t.Helper()
	node, script := shareddata.VADReference(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.f32")
	b := make([]byte, 4*len(pcm))
	for i, v := range pcm {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(in, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.json")
	if o, err := exec.Command(node, script, shareddata.VADModel(t), in, out).CombinedOutput(); err != nil {
		t.Fatalf("ONNX Runtime reference: %v\n%s", err, o)
	}
	var ref []float32
	jb, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(jb, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestProbsMatchONNXRuntime: every 32 ms window's speech probability is
// within 1e-4 of what ONNX Runtime computes from the same ONNX file, with
// the state and the 64-sample context carried as Silero's wrapper carries
// them. The clip lengths are not multiples of 512, so the zero-padded last
// window is compared too.
func TestProbsMatchONNXRuntime(t *testing.T) {
	m := model(t)
	for _, c := range clips(t) {
		t.Run(c.name, func(t *testing.T) {
			pcm := append(c.pcm, c.pcm[:100]...) // a partial last window
			ref := reference(t, pcm)
			got := m.Probs(pcm)
			if len(got) != len(ref) {
				t.Fatalf("%d windows, ONNX Runtime %d", len(got), len(ref))
			}
			var worst float64
			for i := range ref {
				d := math.Abs(float64(got[i] - ref[i]))
				if d > 1e-4 {
					t.Errorf("window %d: %.6f, ONNX Runtime %.6f", i, got[i], ref[i])
				}
				worst = math.Max(worst, d)
			}
			// Prob (one window at a time) computes the same as Probs.
			var st State
			for i := 0; i+WindowSamples <= len(pcm); i += WindowSamples {
				if p := m.Prob(&st, pcm[i:i+WindowSamples]); p != got[i/WindowSamples] {
					t.Fatalf("Prob window %d: %v, Probs %v", i/WindowSamples, p, got[i/WindowSamples])
				}
			}
			t.Logf("%d windows, largest difference %.2g", len(ref), worst)
		})
	}
}

// TestSpeechSegments: the segments whisper.cpp's rules find in real speech
// cover the speech and not the silence around it; recordings without
// speech give none.
func TestSpeechSegments(t *testing.T) {
	d := NewDetector(model(t))
	for _, c := range clips(t) {
		t.Run(c.name, func(t *testing.T) {
			segs := Segments(d.Model.Probs(c.pcm), d.Params)
			sp, err := d.KeepSpeech(context.Background(), c.pcm)
			if err != nil {
				t.Fatal(err)
			}
			if !c.speech {
				if len(segs) != 0 || len(sp.PCM) != 0 || sp.Segments != 0 {
					t.Fatalf("no speech in the clip, found %v (%d samples kept)", segs, len(sp.PCM))
				}
				return
			}
			// Silence, one sentence, silence: one segment around the voice,
			// within 0.2 s (windows are 32 ms, padding 30 ms).
			if len(segs) != 1 {
				t.Fatalf("segments %v, want one", segs)
			}
			s := segs[0]
			if start := float64(s.Start) / 100; math.Abs(start-c.voice[0]) > 0.2 {
				t.Errorf("speech starts at %.2f s, the voice at %.2f s", start, c.voice[0])
			}
			if end := float64(s.End) / 100; math.Abs(end-c.voice[1]) > 0.2 {
				t.Errorf("speech ends at %.2f s, the voice at %.2f s", end, c.voice[1])
			}
			if want := csToSamples(s.End) - csToSamples(s.Start); len(sp.PCM) != want {
				t.Errorf("kept %d samples, the segment holds %d", len(sp.PCM), want)
			}
		})
	}
}

// TestTwoUtterances: two sentences 1.5 s apart are two segments, joined
// with whisper.cpp's 0.1 s overlap and 0.1 s of silence.
func TestTwoUtterances(t *testing.T) {
	d := NewDetector(model(t))
	a := shareddata.Speak(t, "Good morning.", "en-us", 0.5, 0.75, 0)
	b := shareddata.Speak(t, "How are you feeling?", "en-us", 0.75, 0.5, 0)
	pcm := append(a, b...)
	segs := Segments(d.Model.Probs(pcm), d.Params)
	if len(segs) != 2 {
		t.Fatalf("segments %v, want two", segs)
	}
	sp, err := d.KeepSpeech(context.Background(), pcm)
	if err != nil {
		t.Fatal(err)
	}
	want := csToSamples(segs[0].End) + 1600 - csToSamples(segs[0].Start) + 1600 + csToSamples(segs[1].End) - csToSamples(segs[1].Start)
	if sp.Segments != 2 || len(sp.PCM) != want {
		t.Fatalf("kept %d samples in %d segments, want %d in 2", len(sp.PCM), sp.Segments, want)
	}
}

func TestLoadRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(shareddata.VADModel(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":     {},
		"truncated": good[:len(good)/2],
		"text":      []byte("not an onnx file at all\n"),
	} {
		p := filepath.Join(dir, name+".onnx")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := Load(filepath.Join(dir, "absent.onnx")); err == nil {
		t.Error("a missing file loaded")
	}
}
