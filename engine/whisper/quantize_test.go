package whisper

import (
	"bytes"
	"math"
	"path/filepath"
	"testing"

	"github.com/replyd/replyd/internal/shareddata"
)

// TestQuantizeMatchesWhisperCpp re-quantises the shared F16 model to Q8_0
// and compares the bytes with the shared Q8_0 file, which whisper.cpp's
// quantize tool wrote from it.
func TestQuantizeMatchesWhisperCpp(t *testing.T) {
	dir := filepath.Join(shareddata.Whisper(t), "models")
	f16, err := readGGMLFile(filepath.Join(dir, "rand-w64-en-f16.bin"))
	if err != nil {
		t.Fatal(err)
	}
	q8, err := readGGMLFile(filepath.Join(dir, "rand-w64-en-q8_0.bin"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, qt := range q8.tensors {
		if qt.typ != typeQ8_0 {
			continue
		}
		ft := f16.tensors[name]
		if ft == nil || ft.typ != typeF16 {
			t.Fatalf("%s: not F16 in the F16 file", name)
		}
		vals := make([]float32, ft.n())
		dequant(typeF16, ft.data, vals, len(vals))
		var got []byte
		for r := 0; r < len(vals); r += ft.ne[0] {
			got = quantizeRow(got, typeQ8_0, vals[r:r+ft.ne[0]])
		}
		if !bytes.Equal(got, qt.data) {
			t.Fatalf("%s: re-quantised bytes differ from whisper.cpp's", name)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no Q8_0 tensors compared")
	}
}

// TestQuantisedModels writes the demo model in every weight type and
// checks that each loads and gives logits close to the F16 model's (the
// same draws, quantised).
func TestQuantisedModels(t *testing.T) {
	dir := t.TempDir()
	logitsFor := func(wt string) ([]float32, *Model) {
		cfg := DemoConfig()
		cfg.WeightType = wt
		path := filepath.Join(dir, wt+".bin")
		if err := WriteModel(path, cfg); err != nil {
			t.Fatal(err)
		}
		m, err := Load(path, Options{Threads: 1, MaxTokensPerWindow: 3, Logger: quiet})
		if err != nil {
			t.Fatalf("%s: %v", wt, err)
		}
		t.Cleanup(func() { m.Close() })
		if got := m.Info().WeightType; got != wt {
			t.Fatalf("weight type %q, want %q", got, wt)
		}
		mel := m.logMel(chirp(2))
		in := make([]float32, m.hp.NMels*windowFrames)
		mel.window(0, in)
		st := mustWindow(t, m, in, 0)
		h := mustDecode(t, m, st, m.startPrompt(0))
		return mustLogits(t, m, h[(len(m.startPrompt(0))-1)*m.hp.NTextState:]), m
	}
	ref, _ := logitsFor("f16")
	_, sigma := meanStd(ref)
	for _, c := range []struct {
		wt  string
		tol float64 // rms logit error in units of σ
	}{{"f32", 0.01}, {"q8_0", 0.05}, {"q5_1", 0.15}, {"q5_0", 0.15}, {"q4_1", 0.3}, {"q4_0", 0.3}} {
		lg, m := logitsFor(c.wt)
		var se float64
		for i := range lg {
			d := float64(lg[i] - ref[i])
			se += d * d
		}
		rms := math.Sqrt(se/float64(len(lg))) / sigma
		t.Logf("%s: rms logit error %.4f σ", c.wt, rms)
		if rms > c.tol || math.IsNaN(rms) {
			t.Errorf("%s: rms logit error %.4g σ > %.3g σ", c.wt, rms, c.tol)
		}
		if _, err := m.run(t.Context(), chirp(1), -1, 3); err != nil {
			t.Errorf("%s: transcribe: %v", c.wt, err)
		}
	}
}

// meanStd returns the mean and the standard deviation of x.
func meanStd(x []float32) (float64, float64) {
	var s, sq float64
	for _, v := range x {
		s += float64(v)
	}
	mean := s / float64(len(x))
	for _, v := range x {
		sq += (float64(v) - mean) * (float64(v) - mean)
	}
	return mean, math.Sqrt(sq / float64(len(x)))
}

// TestWriteModelReproducesReference regenerates every shared model from its
// generator parameters (seed, EOT row scale, weight type) and compares the
// tensors and the vocabulary byte for byte; the filter bank, which the
// reference took from librosa, within 1e-6.
func TestWriteModelReproducesReference(t *testing.T) {
	dir := shareddata.Whisper(t)
	var man struct {
		Models []struct {
			File       string  `json:"file"`
			WeightType string  `json:"weight_type"`
			HParams    HParams `json:"hparams"`
			Generator  struct {
				Seed        uint64  `json:"seed"`
				EOTRowScale float64 `json:"eot_row_scale"`
			} `json:"generator"`
		} `json:"models"`
	}
	readJSON(t, filepath.Join(dir, "reference", "manifest.json"), &man)
	for _, mi := range man.Models {
		hp := mi.HParams
		cfg := ModelConfig{NVocab: hp.NVocab, NAudioCtx: hp.NAudioCtx, NAudioState: hp.NAudioState, NAudioHead: hp.NAudioHead,
			NAudioLayer: hp.NAudioLayer, NTextCtx: hp.NTextCtx, NTextState: hp.NTextState, NTextHead: hp.NTextHead,
			NTextLayer: hp.NTextLayer, NMels: hp.NMels, WeightType: mi.WeightType, Seed: mi.Generator.Seed,
			EOTRowScale: mi.Generator.EOTRowScale}
		path := filepath.Join(t.TempDir(), mi.File)
		if err := WriteModel(path, cfg); err != nil {
			t.Fatal(err)
		}
		got, err := readGGMLFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := readGGMLFile(filepath.Join(dir, "models", mi.File))
		if err != nil {
			t.Fatal(err)
		}
		if got.hp != want.hp {
			t.Errorf("%s: hparams %+v, want %+v", mi.File, got.hp, want.hp)
		}
		if len(got.vocab) != len(want.vocab) {
			t.Fatalf("%s: %d tokens, want %d", mi.File, len(got.vocab), len(want.vocab))
		}
		for i := range want.vocab {
			if !bytes.Equal(got.vocab[i], want.vocab[i]) {
				t.Fatalf("%s: token %d is %q, want %q", mi.File, i, got.vocab[i], want.vocab[i])
			}
		}
		for i := range want.filters {
			if math.Abs(float64(got.filters[i]-want.filters[i])) > 1e-6 {
				t.Fatalf("%s: filter value %d is %g, want %g", mi.File, i, got.filters[i], want.filters[i])
			}
		}
		if len(got.order) != len(want.order) {
			t.Fatalf("%s: %d tensors, want %d", mi.File, len(got.order), len(want.order))
		}
		for i, name := range want.order {
			g, w := got.tensors[name], want.tensors[name]
			if got.order[i] != name || g == nil || g.typ != w.typ || !bytes.Equal(g.data, w.data) {
				t.Errorf("%s: tensor %d %s differs from the reference", mi.File, i, name)
			}
		}
	}
}
