package modelfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/replyd/replyd/internal/disk"
)

// Errors of the folder operations, mapped to statuses by their callers.
var (
	// ErrExists: a different file of that name is already in the folder.
	ErrExists = errors.New("a different model file of that name is already in the folder")
	// ErrActive: the file is in use and cannot be removed.
	ErrActive = errors.New("the model is in use")
	// ErrNotFound: no such file in the folder.
	ErrNotFound = errors.New("no such model file")
	// ErrBadName: the name is not a model file name this folder takes.
	ErrBadName = errors.New("invalid model file name")
	// ErrTooLarge: the file is larger than the size bound.
	ErrTooLarge = errors.New("the model file is larger than allowed")
	// ErrShort: the source ended or failed before its announced size (a
	// dropped upload).
	ErrShort = errors.New("the model file's copy was cut short")
)

// NoSpaceError says a file does not fit on the models folder's disk:
// either before a byte was written (Need, against Free), or because the
// disk filled while it was copied (Filled: Written bytes were written of
// Size, -1 when the source's size is unknown; Free is what the disk has
// once the partial copy is removed, -1 when unknown).
type NoSpaceError struct {
	Need, Free int64
	Filled     bool
	Written    int64
	Size       int64
}

func (e *NoSpaceError) Error() string {
	if !e.Filled {
		return fmt.Sprintf("the file needs %d bytes (%s) of free disk space and the models folder's disk has %d (%s)",
			e.Need, human(e.Need), e.Free, human(e.Free))
	}
	of := "of the file (its full size is unknown: it was sent without a Content-Length)"
	if e.Size >= 0 {
		of = fmt.Sprintf("of its %d (%s)", e.Size, human(e.Size))
	}
	free := "its free space is unknown"
	if e.Free >= 0 {
		free = fmt.Sprintf("it has %d bytes (%s) free", e.Free, human(e.Free))
	}
	return fmt.Sprintf("the models folder's disk filled after %d bytes (%s) %s were written; nothing was kept, and %s",
		e.Written, human(e.Written), of, free)
}

// isNoSpace reports whether err is a full disk or an exhausted quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// countingWriter counts what reaches w and keeps w's error, so that a
// failed copy tells a failed write (the disk) from a failed read (the
// source).
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// spareBytes is kept free beyond the file itself: the data store and the
// logs still need room after a model came in.
const spareBytes = 64 << 20

// tempPrefix names the files an add writes before it renames them; List
// skips them and Sweep removes those a crash left behind.
const tempPrefix = ".incoming-"

// Entry describes one file in the models folder.
type Entry struct {
	File   string `json:"file"`
	Kind   string `json:"kind,omitempty"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Manifest is "known: <name>" when the SHA-256 is the manifest's for
	// a model, else "not in the manifest".
	Manifest string `json:"manifest"`
	// Check is "ok" or what is wrong with the file.
	Check  string `json:"check"`
	Info   *Info  `json:"info,omitempty"`
	Active bool   `json:"active"`
}

// ValidName reports whether name may be a model file in the folder: a plain
// base name of letters, digits, '.', '_' and '-', not starting with '.',
// ending in .gguf or .bin, at most 200 bytes.
func ValidName(name string) bool {
	if name == "" || len(name) > 200 || name[0] == '.' ||
		!(strings.HasSuffix(name, ".gguf") || strings.HasSuffix(name, ".bin")) {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Manifest knows model files by their SHA-256 (models.Manifest is one);
// nil knows none.
type Manifest interface {
	// Known returns the name of the model whose file has the SHA-256 sum
	// (lowercase hex), false when none has.
	Known(sum string) (name string, ok bool)
}

// ManifestStatus is the Entry.Manifest text for a SHA-256.
func ManifestStatus(m Manifest, sum string) string {
	if m != nil {
		if name, ok := m.Known(sum); ok {
			return "known: " + name
		}
	}
	return "not in the manifest"
}

// Describe checks and hashes one file.
func Describe(path string, m Manifest) (Entry, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{File: filepath.Base(path), Bytes: st.Size()}
	info, sum, err := CheckFile(path)
	if err != nil && !errors.Is(err, ErrInvalid) {
		return e, err
	}
	e.SHA256, e.Manifest = sum, ManifestStatus(m, sum)
	if err != nil {
		e.Check = err.Error()
	} else {
		e.Check, e.Kind, e.Info = "ok", info.Kind, &info
	}
	return e, nil
}

// List describes the model files (.gguf, .bin) in dir, by name; active
// tells which are in use. A missing folder is an empty list.
func List(dir string, m Manifest, active func(name string) bool) ([]Entry, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return []Entry{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []Entry{}
	for _, de := range des {
		if !de.Type().IsRegular() || !ValidName(de.Name()) {
			continue
		}
		e, err := Describe(filepath.Join(dir, de.Name()), m)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		e.Active = active != nil && active(e.File)
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// AddOptions bound an Add.
type AddOptions struct {
	// Size is the announced length of src, -1 when unknown; the free
	// space is checked against it before a byte is written.
	Size int64
	// MaxBytes bounds the file; 0 means no bound.
	MaxBytes int64
	// Free reports the free bytes of dir's file system; nil means disk.Free.
	Free func(dir string) (int64, error)
	// Manifest is matched against the file's SHA-256.
	Manifest Manifest
	// Writer, when set, wraps the temporary file's writes: tests make the
	// disk fill with it.
	Writer func(io.Writer) io.Writer
}

// Add copies src into dir/name: through a temporary file in dir, which is
// checked and then renamed, so the folder never holds a partial or refused
// file under a model's name. A failed read of src (a dropped upload), a
// refused file or an error removes the temporary file; a new Add of the same
// file simply starts again. When dir/name already holds the same bytes, Add
// succeeds without change; different bytes are ErrExists.
func Add(dir, name string, src io.Reader, o AddOptions) (Entry, error) {
	if !ValidName(name) {
		return Entry{}, fmt.Errorf("%w %q: use letters, digits, '.', '_' and '-', ending in .gguf or .bin", ErrBadName, name)
	}
	if o.MaxBytes > 0 && o.Size > o.MaxBytes {
		return Entry{}, fmt.Errorf("%w (%s, at most %s)", ErrTooLarge, human(o.Size), human(o.MaxBytes))
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return Entry{}, err
	}
	free := o.Free
	if free == nil {
		free = disk.Free
	}
	if o.Size >= 0 {
		if n, err := free(dir); err == nil && n >= 0 && o.Size+spareBytes > n {
			return Entry{}, &NoSpaceError{Need: o.Size + spareBytes, Free: n}
		}
	}
	tmp, err := os.CreateTemp(dir, tempPrefix+"*")
	if isNoSpace(err) {
		fr, ferr := free(dir)
		if ferr != nil || fr < 0 {
			fr = -1
		}
		return Entry{}, &NoSpaceError{Filled: true, Size: o.Size, Free: fr}
	}
	if err != nil {
		return Entry{}, err
	}
	done := false
	cleanup := func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
			done = true
		}
	}
	defer cleanup()
	// filled is the error of a disk that filled after written bytes: the
	// partial copy is removed first, so that the free space said is what
	// the disk has after it.
	filled := func(written int64) error {
		cleanup()
		fr, err := free(dir)
		if err != nil || fr < 0 {
			fr = -1
		}
		return &NoSpaceError{Filled: true, Written: written, Size: o.Size, Free: fr}
	}
	// The magic comes first, so that a file of another kind (a 2 GB file
	// of zeros, say) is refused before it is copied.
	var head [4]byte
	if n, err := io.ReadFull(src, head[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Entry{}, invalid("file of %d bytes is too short for a model", n)
		}
		return Entry{}, fmt.Errorf("%w: %w", ErrShort, err)
	}
	if string(head[:]) != "GGUF" && binary.LittleEndian.Uint32(head[:]) != ggmlMagic {
		return Entry{}, invalid("not a GGUF or whisper.cpp ggml file (magic %q)", head[:])
	}
	r := io.MultiReader(bytes.NewReader(head[:]), src)
	if o.MaxBytes > 0 {
		r = io.LimitReader(r, o.MaxBytes+1)
	}
	var w io.Writer = tmp
	if o.Writer != nil {
		w = o.Writer(tmp)
	}
	cw := &countingWriter{w: w}
	n, err := io.Copy(cw, r)
	switch {
	case cw.err != nil && isNoSpace(cw.err):
		return Entry{}, filled(cw.n)
	case cw.err != nil:
		return Entry{}, fmt.Errorf("writing the model file into %s: %w", dir, cw.err)
	case err != nil:
		return Entry{}, fmt.Errorf("%w after %d bytes: %w", ErrShort, n, err)
	}
	if o.MaxBytes > 0 && n > o.MaxBytes {
		return Entry{}, fmt.Errorf("%w (at most %s)", ErrTooLarge, human(o.MaxBytes))
	}
	if o.Size >= 0 && n != o.Size {
		return Entry{}, fmt.Errorf("%w: got %d bytes of %d", ErrShort, n, o.Size)
	}
	if err := tmp.Sync(); err != nil {
		if isNoSpace(err) {
			return Entry{}, filled(n)
		}
		return Entry{}, err
	}
	if err := tmp.Close(); err != nil {
		if isNoSpace(err) {
			return Entry{}, filled(n)
		}
		return Entry{}, err
	}
	e, err := Describe(tmp.Name(), o.Manifest)
	if err != nil {
		return Entry{}, err
	}
	e.File = name
	if e.Check != "ok" {
		return e, fmt.Errorf("%w", checkError(e.Check))
	}
	final := filepath.Join(dir, name)
	if old, err := os.Stat(final); err == nil {
		if old.Size() == e.Bytes {
			if _, sum, _ := CheckFile(final); sum == e.SHA256 {
				return e, nil // the same file again: nothing to do
			}
		}
		return e, fmt.Errorf("%w: %s", ErrExists, name)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return Entry{}, err
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return e, nil
}

// checkError turns a check's text back into an error wrapping ErrInvalid.
func checkError(msg string) error {
	if strings.HasPrefix(msg, ErrInvalid.Error()) {
		return fmt.Errorf("%w%s", ErrInvalid, strings.TrimPrefix(msg, ErrInvalid.Error()))
	}
	return fmt.Errorf("%w: %s", ErrInvalid, msg)
}

// Remove deletes dir/name unless active says it is in use.
func Remove(dir, name string, active func(name string) bool) error {
	if !ValidName(name) {
		return fmt.Errorf("%w %q", ErrBadName, name)
	}
	if active != nil && active(name) {
		return fmt.Errorf("%w: %s", ErrActive, name)
	}
	err := os.Remove(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return err
}

// Sweep removes the temporary files of adds that a crash interrupted.
func Sweep(dir string) {
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tempPrefix) && de.Type().IsRegular() {
			os.Remove(filepath.Join(dir, de.Name()))
		}
	}
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", (n+1023)/1024)
}
