package whisper

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/replyd/replyd/engine"
	"github.com/replyd/replyd/internal/shareddata"
)

// placeModel is the conformance model the placement tests load.
func placeModel(t *testing.T) (string, []float32) {
	dir := shareddata.Whisper(t)
	pcm := readWAV(t, filepath.Join(dir, "audio", "jfk.wav"))
	return filepath.Join(dir, "models", "rand-w64-en-f16.bin"), pcm[:3*SampleRate]
}

func placeLoad(t *testing.T, path string, opts Options) (*Model, error) {
	t.Helper()
	opts.Threads, opts.MaxTokensPerWindow, opts.NoFallback, opts.Logger = 1, 16, true, quiet
	m, err := Load(path, opts)
	if err == nil {
		t.Cleanup(func() { m.Close() })
	}
	return m, err
}

// TestGraphAllocFailureAtLoad makes each allocation of the graph path fail
// in turn, as ggml's allocators fail when the device is out of memory (a
// NULL buffer, a false reservation): Load returns an error wrapping
// ErrPlacement, never a crash; with CPUIfUnplaced the model comes up on the
// BLAS path, says so in Status, and transcribes as a BLAS model does.
func TestGraphAllocFailureAtLoad(t *testing.T) {
	path, pcm := placeModel(t)
	defer failGraphAllocs(0)
	// 1: the weights and caches; 2-8: the reservation of the seven graphs.
	for _, n := range []int{1, 2, 5, 8} {
		failGraphAllocs(n)
		_, err := placeLoad(t, path, Options{Compute: ComputeGGMLCPU})
		if !errors.Is(err, ErrPlacement) || !strings.Contains(err.Error(), "failed") {
			t.Errorf("allocation %d failing: Load = %v, want an ErrPlacement that says what failed", n, err)
		}
	}
	blas, err := placeLoad(t, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := blas.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failGraphAllocs(1)
	m, err := placeLoad(t, path, Options{Compute: ComputeGGMLCPU, CPUIfUnplaced: true})
	if err != nil {
		t.Fatalf("Load with CPUIfUnplaced = %v", err)
	}
	if m.gg != nil || m.Backend() != "" || m.Info().DeviceBytes != 0 {
		t.Errorf("fell back, yet the graph path is set: backend %q", m.Backend())
	}
	if st := m.Status(); st.Backend != "cpu" || !strings.Contains(st.Warning, "could not be placed") {
		t.Errorf("Status after the fallback: backend %q, warning %q", st.Backend, st.Warning)
	}
	got, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
	if err != nil || !slices.Equal(got.Tokens, want.Tokens) {
		t.Errorf("after the fallback: %v %v, want the BLAS path's %v", got.Tokens, err, want.Tokens)
	}
}

// TestGraphAllocFailureMidTurn makes a graph's allocation fail inside a
// transcription (an encoder step, the cross K/V, a decoder step, the
// logits): Transcribe returns a speech-to-text error rather than
// panicking, and the next transcription runs as before.
func TestGraphAllocFailureMidTurn(t *testing.T) {
	path, pcm := placeModel(t)
	defer failGraphAllocs(0)
	m, err := placeLoad(t, path, Options{Compute: ComputeGGMLCPU})
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	steps := m.gg.steps()
	for _, n := range []int{1, steps, steps + 1, steps + 2, steps + 3, steps + 6} {
		failGraphAllocs(n)
		_, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
		if !errors.Is(err, errGraph) || engine.KindOf(err) != engine.KindSTT {
			t.Errorf("allocation %d of the turn failing: Transcribe = %v, want a speech-to-text error wrapping errGraph", n, err)
		}
		failGraphAllocs(0)
		got, err := m.Transcribe(context.Background(), pcm, engine.TranscribeOptions{})
		if err != nil || !slices.Equal(got.Tokens, want.Tokens) {
			t.Errorf("after the failure at %d: %v %v, want %v", n, got.Tokens, err, want.Tokens)
		}
	}
}

// TestGraphMemoryCheck: the graph path is placed only when its memory and
// the language model's (DeviceReserve) fit in the device's free memory
// (ggml_backend_dev_memory; on the CPU backend, the host's). What it
// placed is in Info; an impossible reserve is a clear error, or the BLAS
// path with CPUIfUnplaced.
func TestGraphMemoryCheck(t *testing.T) {
	path, _ := placeModel(t)
	m, err := placeLoad(t, path, Options{Compute: ComputeGGMLCPU, DeviceReserve: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	info := m.Info()
	if info.Backend != "CPU" || info.DeviceBytes < m.gg.weightBytes+m.gg.compBytes || m.gg.compBytes <= 0 || m.gg.devFree <= 0 {
		t.Errorf("placed on %q: %d device bytes (weights %d, compute %d, free %d)", info.Backend, info.DeviceBytes,
			m.gg.weightBytes, m.gg.compBytes, m.gg.devFree)
	}
	_, err = placeLoad(t, path, Options{Compute: ComputeGGMLCPU, DeviceReserve: 1 << 62})
	if !errors.Is(err, ErrPlacement) || !strings.Contains(err.Error(), "free") || !strings.Contains(err.Error(), "language model") {
		t.Errorf("with a reserve larger than the device: Load = %v, want an ErrPlacement naming the free memory", err)
	}
	m, err = placeLoad(t, path, Options{Compute: ComputeGGMLCPU, DeviceReserve: 1 << 62, CPUIfUnplaced: true})
	if err != nil || m.gg != nil {
		t.Fatalf("with CPUIfUnplaced: %v, graph %v", err, m.gg != nil)
	}
}

// TestGraphDropsHostWeights: with the weights on the graph's backend, the
// host copy is freed (Info().Bytes counts host memory), and the logits are
// computed on the backend from the hidden state, as the BLAS path computes
// them from its copy.
func TestGraphDropsHostWeights(t *testing.T) {
	dir := shareddata.Whisper(t)
	for _, file := range []string{"rand-w64-en-f32.bin", "rand-w64-en-f16.bin", "rand-w64-en-q8_0.bin"} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(dir, "models", file)
			blas, err := placeLoad(t, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			gg, err := placeLoad(t, path, Options{Compute: ComputeGGMLCPU})
			if err != nil {
				t.Fatal(err)
			}
			if b, g := blas.Info().Bytes, gg.Info().Bytes; g > b/2 {
				t.Errorf("host memory: %d bytes on the graph path, %d on the BLAS path", g, b)
			}
			if gg.shadow != nil || gg.tokEmb.raw != nil || gg.tokEmb.f32 != nil || gg.enc[0].fc1.raw != nil || gg.enc[0].fc1.f32 != nil {
				t.Error("the host copy of the weights is still there")
			}
			st := mustWindow(t, blas, make([]float32, blas.hp.NMels*windowFrames), 0)
			h := slices.Clone(mustDecode(t, blas, st, blas.startPrompt(0)))
			h = h[len(h)-blas.hp.NTextState:]
			a, b := mustLogits(t, blas, h), mustLogits(t, gg, h)
			tol := 1e-4
			if blas.wtype != typeF32 { // ggml rounds the hidden state to the weights' type first, as whisper.cpp
				tol = 2e-2
			}
			var worst, scale float64
			for i := range a {
				worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
				scale = math.Max(scale, math.Abs(float64(a[i])))
			}
			if worst > tol*scale {
				t.Errorf("logits differ by up to %g (largest %g)", worst, scale)
			}
			if tl := mustTextLogits(t, gg, h); len(tl) != gg.tok.eot+1 || tl[10] != b[10] {
				t.Errorf("textLogits: %d values", len(tl))
			}
		})
	}
}
