package whisper

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/replyd/replyd/internal/testaudio"
)

// readWAV reads a 16 kHz 16-bit PCM mono WAV as int16/32768.
func readWAV(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rate, pcm, err := testaudio.ReadMono16(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if rate != SampleRate {
		t.Fatalf("%s: %d Hz, want %d", path, rate, SampleRate)
	}
	return pcm
}

// readJSON decodes the JSON file at path into v.
func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
