package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// ErrDamaged is wrapped by the errors of Open, VerifyFile and Check for a
// data file that is not whole: truncated, with overwritten pages, or not a
// bbolt file at all. The message names the file, what is wrong and what to
// do; replyd refuses to use such a file (restore the last backup).
var ErrDamaged = errors.New("the data file is damaged")

// RestoreAdvice is what every damaged-file message tells the operator to do.
const RestoreAdvice = "replyd will not use it: stop replyd and restore the last backup with `replyd restore FILE` (docs/operations.md, \"Backup and restore\"), then run `replyd check`"

// DamagedError describes a damaged data file. It wraps ErrDamaged.
type DamagedError struct {
	Path    string // the data file
	Problem string // what is wrong, in words
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("store: %s is damaged: %s. %s", e.Path, e.Problem, RestoreAdvice)
}

// Unwrap returns ErrDamaged.
func (e *DamagedError) Unwrap() error { return ErrDamaged }

// The layout of a bbolt file, as etcd-io/bbolt v1.5 writes it
// (internal/common/page.go, meta.go, bucket.go): fields in the machine's
// byte order, little-endian on every platform replyd ships for (amd64,
// arm64).
const (
	pageHeaderSize  = 16 // id u64, flags u16, count u16, overflow u32
	elemSize        = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	bucketHeader    = 16 // root pgid u64, sequence u64; an inline bucket's page follows
	metaChecksumOff = 56 // the meta's checksum (FNV-64a of the 56 bytes before it)
	metaSize        = 64
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	pgidNoFreelist  = ^uint64(0)

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10
	flagBucket   = 0x01 // a leaf element that is a bucket

	maxNesting = 64 // buckets within buckets, and tree depth: far beyond any real file
)

var le = binary.LittleEndian

// VerifyFile checks the bbolt file at path without mapping it into memory:
// the file must be at least as long as its meta page says, and every page
// reachable from its buckets must be in the file, identify itself, be of the
// right type, hold its elements within its bounds, keep its keys in order
// and be referenced once. These are the conditions under which bbolt reads
// the file without a fault or an assertion's panic (a truncated file faults
// through bbolt's memory map, a page of garbage panics its reader), so Open
// runs VerifyFile before bbolt ever maps the file. Problems are returned as
// a *DamagedError; a file that cannot be read gives the I/O error.
//
// VerifyFile does not check what bbolt's own Tx.Check adds (pages neither
// reachable nor free): DB.Check runs that once the file is known safe to map.
// It reads every reachable page once: about a second per GB.
func VerifyFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return verify(f, fi.Size(), path)
}

// verify checks the bbolt file of size bytes read through r. Whatever the
// bytes, it returns an error or nil and never panics: a bug here must not
// become the crash it exists to prevent.
func verify(r io.ReaderAt, size int64, path string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &DamagedError{Path: path, Problem: fmt.Sprintf("the check itself failed on it (%v)", p)}
		}
	}()
	damaged := func(format string, args ...any) error {
		return &DamagedError{Path: path, Problem: fmt.Sprintf(format, args...)}
	}
	if size == 0 {
		return damaged("it is empty (0 bytes): it holds no data")
	}
	m, err := chooseMeta(r, size)
	if err != nil {
		return err
	}
	if m == nil {
		return damaged("it is not a valid bbolt data file: neither of its two meta pages is valid (both were overwritten, or it is not replyd's file)")
	}
	if m.hwm < 2 || m.hwm > uint64(size)/uint64(m.pageSize) {
		return damaged("it is truncated: its meta page says it holds %d pages of %d bytes (%d bytes) but the file has %d bytes",
			m.hwm, m.pageSize, m.hwm*uint64(m.pageSize), size)
	}
	w := &walker{r: r, meta: m, seen: map[uint64]bool{}, path: path}
	if m.freelist != pgidNoFreelist {
		if err := w.freelistPage(m.freelist); err != nil {
			return err
		}
	}
	if _, err := w.tree(m.root, nil, nil, 0, "the root bucket"); err != nil {
		return err
	}
	return nil
}

// meta is the part of a bbolt meta page the check needs.
type meta struct {
	pageSize uint32
	root     uint64 // the root bucket's page
	freelist uint64
	hwm      uint64 // pages in use: the high water mark
	txid     uint64
}

// parseMeta reads the meta page at the start of p, or returns nil when it
// is not a valid one (magic, version, checksum, page type), as bbolt's
// Meta.Validate decides.
func parseMeta(p []byte) *meta {
	if len(p) < pageHeaderSize+metaSize || le.Uint16(p[8:]) != flagMeta {
		return nil
	}
	b := p[pageHeaderSize : pageHeaderSize+metaSize]
	h := fnv.New64a()
	_, _ = h.Write(b[:metaChecksumOff])
	if le.Uint32(b[0:]) != boltMagic || le.Uint32(b[4:]) != boltVersion || le.Uint64(b[metaChecksumOff:]) != h.Sum64() {
		return nil
	}
	m := &meta{pageSize: le.Uint32(b[8:]), root: le.Uint64(b[16:]), freelist: le.Uint64(b[32:]), hwm: le.Uint64(b[40:]), txid: le.Uint64(b[48:])}
	if m.pageSize < 1024 || m.pageSize > 1<<24 {
		return nil
	}
	return m
}

// chooseMeta returns the meta page bbolt would use (DB.meta: the valid one
// of the two with the higher transaction id), or nil when neither is valid.
// The second meta page sits one page in; when the first is unreadable, its
// offset is found as bbolt's getPageSizeFromSecondMeta does, trying page
// sizes from 1 KiB to 16 MiB.
func chooseMeta(r io.ReaderAt, size int64) (*meta, error) {
	read := func(off int64) ([]byte, error) {
		b := make([]byte, pageHeaderSize+metaSize)
		n, err := r.ReadAt(b, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return b[:n], nil
	}
	p0, err := read(0)
	if err != nil {
		return nil, err
	}
	m0 := parseMeta(p0)
	var offsets []int64
	if m0 != nil {
		offsets = []int64{int64(m0.pageSize)}
	} else {
		for i := 0; i <= 14; i++ {
			offsets = append(offsets, 1024<<i)
		}
	}
	var m1 *meta
	for _, off := range offsets {
		if off >= size {
			break
		}
		p1, err := read(off)
		if err != nil {
			return nil, err
		}
		if m := parseMeta(p1); m != nil && int64(m.pageSize) == off {
			m1 = m
			break
		}
	}
	switch {
	case m0 == nil:
		return m1, nil
	case m1 == nil || m0.pageSize != m1.pageSize || m0.txid >= m1.txid:
		return m0, nil
	}
	return m1, nil
}

// walker checks the pages reachable from one meta page.
type walker struct {
	r    io.ReaderAt
	meta *meta
	seen map[uint64]bool // pages already reached, overflow pages included
	path string
}

func (w *walker) damaged(format string, args ...any) error {
	return &DamagedError{Path: w.path, Problem: fmt.Sprintf(format, args...)}
}

// page reads page id with its overflow pages, after checking that they lie
// below the high water mark, were not reached before, and that the page
// identifies itself as id.
func (w *walker) page(id uint64, what string) ([]byte, error) {
	if id < 2 || id >= w.meta.hwm {
		return nil, w.damaged("%s points to page %d, outside its pages 2 to %d", what, id, w.meta.hwm-1)
	}
	ps := uint64(w.meta.pageSize)
	head := make([]byte, pageHeaderSize)
	if _, err := w.r.ReadAt(head, int64(id*ps)); err != nil {
		return nil, w.damaged("page %d (%s) cannot be read: %v", id, what, err)
	}
	if got := le.Uint64(head); got != id {
		return nil, w.damaged("page %d (%s) holds something else (it says it is page %d): it was overwritten", id, what, got)
	}
	overflow := uint64(le.Uint32(head[12:]))
	if overflow >= w.meta.hwm-id {
		return nil, w.damaged("page %d (%s) says it runs over %d more pages, past the end of its pages", id, what, overflow)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, w.damaged("page %d (%s) is reached twice", i, what)
		}
		w.seen[i] = true
	}
	p := make([]byte, (overflow+1)*ps)
	if _, err := w.r.ReadAt(p, int64(id*ps)); err != nil {
		return nil, w.damaged("page %d (%s) cannot be read: %v", id, what, err)
	}
	return p, nil
}

// freelistPage checks the page listing the free pages (files written
// before replyd stopped syncing the freelist still have one).
func (w *walker) freelistPage(id uint64) error {
	p, err := w.page(id, "the freelist")
	if err != nil {
		return err
	}
	if le.Uint16(p[8:]) != flagFreelist {
		return w.damaged("page %d should list the free pages but is of type %#x", id, le.Uint16(p[8:]))
	}
	start, count := uint64(0), uint64(le.Uint16(p[10:]))
	if count == 0xFFFF {
		if len(p) < pageHeaderSize+8 {
			return w.damaged("the freelist page %d is cut short", id)
		}
		start, count = 1, le.Uint64(p[pageHeaderSize:])
	}
	if count > uint64(len(p)-pageHeaderSize)/8-start {
		return w.damaged("the freelist page %d claims %d free pages, more than it can hold", id, count)
	}
	free := make(map[uint64]bool, count)
	for i := uint64(0); i < count; i++ {
		f := le.Uint64(p[pageHeaderSize+(start+i)*8:])
		if f < 2 || f >= w.meta.hwm || free[f] {
			return w.damaged("the freelist page %d lists page %d, which is out of range or listed twice", id, f)
		}
		free[f] = true
	}
	return nil
}

// element is one entry of a branch or leaf page.
type element struct {
	key, value []byte
	child      uint64 // branch pages: the page below
	bucket     bool   // leaf pages: the value is a bucket
}

// elements parses the branch or leaf page in p (a whole page, or an inline
// bucket's page inside a value), checking that every element lies within p.
func (w *walker) elements(p []byte, where string) (branch bool, elems []element, err error) {
	if len(p) < pageHeaderSize {
		return false, nil, w.damaged("%s is cut short", where)
	}
	switch flags := le.Uint16(p[8:]); flags {
	case flagBranch:
		branch = true
	case flagLeaf:
	default:
		return false, nil, w.damaged("%s should be a branch or leaf page but is of type %#x: it was overwritten", where, flags)
	}
	count := uint64(le.Uint16(p[10:]))
	n := uint64(len(p))
	if pageHeaderSize+count*elemSize > n {
		return false, nil, w.damaged("%s claims %d entries, more than it can hold", where, count)
	}
	if branch && count == 0 {
		return false, nil, w.damaged("%s is a branch page with no entries", where)
	}
	elems = make([]element, count)
	for i := uint64(0); i < count; i++ {
		at := pageHeaderSize + i*elemSize
		e := p[at : at+elemSize]
		var pos, ksize, vsize uint64
		if branch {
			pos, ksize = uint64(le.Uint32(e[0:])), uint64(le.Uint32(e[4:]))
			elems[i].child = le.Uint64(e[8:])
		} else {
			elems[i].bucket = le.Uint32(e[0:])&flagBucket != 0
			pos, ksize, vsize = uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
		}
		start := at + pos
		if start+ksize+vsize > n {
			return false, nil, w.damaged("entry %d of %s points outside the page", i, where)
		}
		elems[i].key = p[start : start+ksize]
		elems[i].value = p[start+ksize : start+ksize+vsize]
	}
	return branch, elems, nil
}

// tree checks the b+tree at page id: every key within [lo, hi) (nil: no
// bound) and after the one before, as bbolt's recursivelyCheckPageKeyOrder
// requires; it returns the last key of the subtree.
func (w *walker) tree(id uint64, lo, hi []byte, depth int, what string) ([]byte, error) {
	if depth > maxNesting {
		return nil, w.damaged("%s nests deeper than any real file (a loop)", what)
	}
	p, err := w.page(id, what)
	if err != nil {
		return nil, err
	}
	return w.node(p, lo, hi, depth, fmt.Sprintf("page %d (%s)", id, what))
}

// node checks the page p (a file page, or an inline bucket's page).
func (w *walker) node(p, lo, hi []byte, depth int, where string) ([]byte, error) {
	branch, elems, err := w.elements(p, where)
	if err != nil {
		return nil, err
	}
	prev := lo
	for i, e := range elems {
		if (i == 0 && prev != nil && bytes.Compare(prev, e.key) > 0) || (i > 0 && bytes.Compare(prev, e.key) >= 0) ||
			(hi != nil && bytes.Compare(e.key, hi) >= 0) {
			return nil, w.damaged("the keys of %s are out of order (entry %d)", where, i)
		}
		if branch {
			next := hi
			if i < len(elems)-1 {
				next = elems[i+1].key
			}
			last, err := w.tree(e.child, e.key, next, depth+1, "below "+where)
			if err != nil {
				return nil, err
			}
			prev = last
			continue
		}
		prev = e.key
		if e.bucket {
			if err := w.bucket(e, depth, where); err != nil {
				return nil, err
			}
		}
	}
	if branch {
		return prev, nil
	}
	if len(elems) > 0 {
		return elems[len(elems)-1].key, nil
	}
	return nil, nil
}

// bucket checks the bucket stored in leaf element e: its tree, or its
// inline page.
func (w *walker) bucket(e element, depth int, where string) error {
	what := fmt.Sprintf("bucket %q in %s", e.key, where)
	if depth > maxNesting {
		return w.damaged("%s nests deeper than any real file", what)
	}
	if len(e.value) < bucketHeader {
		return w.damaged("%s is cut short", what)
	}
	if root := le.Uint64(e.value); root != 0 {
		_, err := w.tree(root, nil, nil, depth+1, what)
		return err
	}
	inline := e.value[bucketHeader:]
	if len(inline) >= pageHeaderSize && le.Uint16(inline[8:]) != flagLeaf {
		return w.damaged("the inline page of %s is not a leaf page", what)
	}
	_, err := w.node(inline, nil, nil, depth+1, "the inline page of "+what)
	return err
}
