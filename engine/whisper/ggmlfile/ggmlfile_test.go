package ggmlfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// file builds a small whisper.cpp ggml file: Whisper's fixed shapes, a
// state width of 4, two tokens and two tensors (an F32 vector and a Q8_0
// matrix of one block per row).
func file(hp []int32) []byte {
	var b bytes.Buffer
	w := func(v ...int32) { binary.Write(&b, binary.LittleEndian, v) }
	if hp == nil {
		hp = []int32{51864, 1500, 4, 1, 1, 448, 4, 1, 1, 2, 2007}
	}
	w(Magic)
	w(hp...)
	w(hp[9], Filters)
	for i := 0; i < int(hp[9])*Filters; i++ {
		binary.Write(&b, binary.LittleEndian, float32(i))
	}
	w(2, 1)
	b.WriteString("!")
	w(1)
	b.WriteString(" ")
	w(1, 3, int32(F32), 4)
	b.WriteString("vec")
	b.Write(make([]byte, 16))
	w(2, 3, int32(Q8_0), 32, 2)
	b.WriteString("mat")
	b.Write(make([]byte, 2*34))
	return b.Bytes()
}

func TestReaderReadsHeaderAndTensors(t *testing.T) {
	b := file(nil)
	r := NewReader(bytes.NewReader(b), int64(len(b)))
	h, err := r.Header(true)
	if err != nil {
		t.Fatal(err)
	}
	if h.HParams.NAudioState != 4 || h.HParams.FType != 2007 || h.NFilter != Filters || len(h.Filters) != 2*Filters ||
		h.Filters[5] != 5 || h.NTokens != 2 || string(h.Vocab[1]) != " " {
		t.Fatalf("header %+v", h)
	}
	v, err := r.Next()
	if err != nil || v.Name != "vec" || v.Type != F32 || v.Bytes != 16 {
		t.Fatalf("first tensor %+v, %v", v, err)
	}
	// Next skips the data nobody read.
	m, err := r.Next()
	if err != nil || m.Name != "mat" || m.Type != Q8_0 || m.Bytes != 68 || len(m.Ne) != 2 || m.Ne[1] != 2 {
		t.Fatalf("second tensor %+v, %v", m, err)
	}
	if err := r.Data(make([]byte, 68)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	// Without keep, the same file checks without keeping anything.
	r = NewReader(bytes.NewReader(b), int64(len(b)))
	if h, err := r.Header(false); err != nil || h.Filters != nil || h.Vocab != nil || h.NTokens != 2 {
		t.Fatalf("header without keep: %+v, %v", h, err)
	}
}

func TestReaderRefusesBadFiles(t *testing.T) {
	good := file(nil)
	hp := func(i int, v int32) []byte {
		p := []int32{51864, 1500, 4, 1, 1, 448, 4, 1, 1, 2, 2007}
		p[i] = v
		return file(p)
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"magic":       {append([]byte("GGUF"), good[4:]...), "bad magic"},
		"audio ctx":   {hp(1, 1000), "n_audio_ctx = 1000"},
		"state":       {hp(6, 8), "differs from n_text_state"},
		"vocab":       {hp(0, 100), "smaller than Whisper's"},
		"truncated":   {good[:len(good)-10], "truncated"},
		"header only": {good[:30], "truncated"},
	} {
		r := NewReader(bytes.NewReader(c.b), int64(len(c.b)))
		_, err := r.Header(true)
		for err == nil {
			_, err = r.Next()
		}
		if err == io.EOF || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrFormat mentioning %q", name, err, c.want)
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add(file(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(bytes.NewReader(b), int64(len(b)))
		if _, err := r.Header(true); err != nil {
			return
		}
		for {
			tn, err := r.Next()
			if err != nil {
				return
			}
			if tn.Bytes > int64(len(b)) {
				t.Fatalf("tensor of %d bytes in a file of %d", tn.Bytes, len(b))
			}
		}
	})
}
