// Package modelfile checks a model file before replyd uses it: a GGUF file
// (the language model, read by llama.cpp) or a whisper.cpp ggml file
// (speech). It parses the header and the tensor table in pure Go, without
// loading weights, and refuses a truncated, corrupt or hostile file with what
// is wrong. Every count and length read from the file is bounded by what the
// file can still hold, so no field makes the checker allocate more than a
// small multiple of the header it has read, and tensor data is skipped, never
// read. The formats are those engine/llm (gguf_read.go) and engine/whisper
// (ggml.go) read; this package must not import those cgo leaves.
package modelfile

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// Kinds of model file.
const (
	KindLLM     = "llm"     // GGUF
	KindWhisper = "whisper" // whisper.cpp ggml
)

// ErrInvalid is wrapped by every error that says the file is not a usable
// model file (as opposed to an error reading it).
var ErrInvalid = errors.New("invalid model file")

// Info is what a successful check found.
type Info struct {
	Kind string `json:"kind"`
	// Arch is the GGUF general.architecture, or "whisper".
	Arch string `json:"arch"`
	// Name is the GGUF general.name, or Whisper's size by layer count.
	Name    string `json:"name,omitempty"`
	Version int    `json:"version,omitempty"` // GGUF version
	Tensors int    `json:"tensors"`
	// Vocab is the number of tokens in the vocabulary.
	Vocab int `json:"vocab"`
	// ChatTemplate tells whether a GGUF carries tokenizer.chat_template
	// (replyd then falls back to ChatML; see Notes).
	ChatTemplate bool `json:"chat_template"`
	// WeightTypes counts tensors per element type ("q4_K": 120, ...).
	WeightTypes map[string]int `json:"weight_types"`
	// Bytes is the file length.
	Bytes int64 `json:"bytes"`
	// Notes are remarks that do not refuse the file.
	Notes []string `json:"notes,omitempty"`
}

// Check parses the model file r of the given size, either format. The error
// wraps ErrInvalid when the file is not a valid model file.
func Check(r io.ReaderAt, size int64) (Info, error) {
	var magic [4]byte
	if size < 4 {
		return Info{}, invalid("file of %d bytes is too short for a model", size)
	}
	if _, err := r.ReadAt(magic[:], 0); err != nil {
		return Info{}, fmt.Errorf("read: %w", err)
	}
	switch {
	case string(magic[:]) == "GGUF":
		return CheckGGUF(r, size)
	case binary.LittleEndian.Uint32(magic[:]) == ggmlMagic:
		return CheckWhisper(r, size)
	}
	return Info{}, invalid("not a GGUF or whisper.cpp ggml file (magic %q)", magic[:])
}

// CheckFile checks the file at path and computes its SHA-256 (lowercase
// hex) in the same call. The hash is returned even when the check fails.
func CheckFile(path string) (Info, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, "", err
	}
	if !st.Mode().IsRegular() {
		return Info{}, "", invalid("%s is not a regular file", st.Name())
	}
	info, cerr := Check(f, st.Size())
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size())); err != nil {
		return info, "", err
	}
	return info, hex.EncodeToString(h.Sum(nil)), cerr
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// reader reads little-endian fields sequentially from a section of a file,
// knowing how many bytes are left so that no length read from the file is
// trusted beyond them.
type reader struct {
	br   *bufio.Reader
	off  int64
	size int64
	err  error
	buf  [8]byte
}

func newReader(r io.ReaderAt, size int64) *reader {
	return &reader{br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16), size: size}
}

func (r *reader) left() int64 { return r.size - r.off }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrInvalid, r.off, fmt.Sprintf(format, args...))
	}
}

// need fails when fewer than n bytes are left.
func (r *reader) need(n int64, what string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > r.left() {
		r.fail("truncated: %s needs %d bytes, %d left", what, n, r.left())
		return false
	}
	return true
}

func (r *reader) fixed(n int) []byte {
	if !r.need(int64(n), "a field") {
		return r.buf[:n]
	}
	if _, err := io.ReadFull(r.br, r.buf[:n]); err != nil {
		r.fail("read: %v", err)
		return r.buf[:n]
	}
	r.off += int64(n)
	return r.buf[:n]
}

func (r *reader) u8() uint8   { return r.fixed(1)[0] }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.fixed(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.fixed(8)) }
func (r *reader) i32() int    { return int(int32(r.u32())) }

// bytes reads n bytes into a new slice; n is at most max and what is left.
func (r *reader) bytes(n int64, max int64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > max {
		r.fail("%s of %d bytes (at most %d)", what, n, max)
		return nil
	}
	if !r.need(n, what) {
		return nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.br, b); err != nil {
		r.fail("read: %v", err)
		return nil
	}
	r.off += n
	return b
}

// skip passes over n bytes.
func (r *reader) skip(n int64, what string) {
	if !r.need(n, what) {
		return
	}
	for n > 0 {
		step := min(n, 1<<30)
		d, err := r.br.Discard(int(step))
		r.off += int64(d)
		n -= int64(d)
		if err != nil {
			r.fail("read: %v", err)
			return
		}
	}
}
