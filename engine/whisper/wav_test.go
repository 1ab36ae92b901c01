package whisper

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"testing"
)

// readWAV reads a 16-bit PCM mono WAV as int16/32768.
func readWAV(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 12 || string(b[:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		t.Fatalf("%s: not a RIFF/WAVE file", path)
	}
	var fmtOK bool
	for off := 12; off+8 <= len(b); {
		id, size := string(b[off:off+4]), int(binary.LittleEndian.Uint32(b[off+4:]))
		body := b[off+8 : min(off+8+size, len(b))]
		switch id {
		case "fmt ":
			if len(body) < 16 || binary.LittleEndian.Uint16(body) != 1 || binary.LittleEndian.Uint16(body[2:]) != 1 ||
				binary.LittleEndian.Uint32(body[4:]) != SampleRate || binary.LittleEndian.Uint16(body[14:]) != 16 {
				t.Fatalf("%s: not 16 kHz mono 16-bit PCM", path)
			}
			fmtOK = true
		case "data":
			if !fmtOK {
				t.Fatalf("%s: data before fmt", path)
			}
			pcm := make([]float32, len(body)/2)
			for i := range pcm {
				pcm[i] = float32(int16(binary.LittleEndian.Uint16(body[2*i:]))) / 32768
			}
			return pcm
		}
		off += 8 + size + size&1
	}
	t.Fatalf("%s: no data chunk", path)
	return nil
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
