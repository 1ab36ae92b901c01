package whisper

/*
#include <stdint.h>
#include <stdlib.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#define RD_HUGE (2u << 20)

static size_t rd_huge_len(size_t n) { return (n + RD_HUGE - 1) & ~(size_t)(RD_HUGE - 1); }

// rd_huge_alloc returns n bytes (n > 0) aligned to 2 MB, which Linux may
// back with transparent huge pages (or, with huge 0, must not), or NULL.
static void *rd_huge_alloc(size_t n, int huge) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
	size_t len = rd_huge_len(n);
	char *p = mmap(NULL, len + RD_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) return NULL;
	char *q = (char *)(((uintptr_t)p + RD_HUGE - 1) & ~(uintptr_t)(RD_HUGE - 1));
	if (q > p) munmap(p, q - p);
	if (q + len < p + len + RD_HUGE) munmap(q + len, p + len + RD_HUGE - (q + len));
	madvise(q, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	return q;
#else
	return malloc(n);
#endif
}

// rd_huge_drop gives the whole 4 KB pages inside [p, p+n) back to the
// system; the range stays mapped and reads as zeros.
static void rd_huge_drop(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_DONTNEED)
	uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, hi = ((uintptr_t)p + n) & ~(uintptr_t)4095;
	if (lo < hi) madvise((void *)lo, hi - lo, MADV_DONTNEED);
#endif
}

static void rd_huge_free(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
	munmap(p, rd_huge_len(n));
#else
	free(p);
#endif
}
*/
import "C"

import "unsafe"

// A decoder step reads its weights, the token embedding (or its shadow)
// and the K/V caches once per token, about 70 MB for base.en, in streams
// that cross a 4 KB page every few hundred nanoseconds. On 4 KB pages nearly
// every one is a TLB miss, and streaming from memory ran at about half the
// rate of 2 MB pages on the development box (73 MB: 5.9 ms against 2.9 ms,
// medians of 40 alternated passes). So the model's tensors, the shadow and
// the K/V caches live in memory that asks the kernel for transparent huge
// pages (where it grants them only on request, as Debian's default
// "madvise" does).

// hugePages is true unless a benchmark sets it false to compare.
var hugePages = true

// hugeAlloc returns n bytes of memory aligned to 2 MB, outside the Go heap,
// that the kernel may back with huge pages; nil when it cannot be had. It
// must be released with hugeFree.
func hugeAlloc(n int64) []byte {
	if n <= 0 {
		return nil
	}
	huge := C.int(0)
	if hugePages {
		huge = 1
	}
	p := C.rd_huge_alloc(C.size_t(n), huge)
	if p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// hugeFree releases memory from hugeAlloc.
func hugeFree(b []byte) {
	if cap(b) > 0 {
		C.rd_huge_free(unsafe.Pointer(&b[:1][0]), C.size_t(cap(b)))
	}
}

// arena hands out pieces of one hugeAlloc, each aligned to 64 bytes.
type arena struct {
	mem  []byte
	used int64
}

// arenaSize returns the bytes an arena needs for pieces of the given sizes.
func arenaSize(sizes ...int64) int64 {
	var n int64
	for _, s := range sizes {
		n += (s + 63) &^ 63
	}
	return n
}

// newArena returns an arena of n bytes, or nil when the memory cannot be
// had.
func newArena(n int64) *arena {
	mem := hugeAlloc(n)
	if mem == nil {
		return nil
	}
	return &arena{mem: mem}
}

// take returns the next n bytes of the arena; the arena must have room.
func (a *arena) take(n int64) []byte {
	b := a.mem[a.used : a.used+n : a.used+n]
	a.used += (n + 63) &^ 63
	return b
}

// tensorArena holds a model file's tensors one after another in one
// hugeAlloc the size of the file; tensors that do not fit (never, for a
// well-formed file) come from cAlloc.
type tensorArena struct{ arena }

// newTensorArena returns an arena for the tensors of a file of size bytes,
// or nil when the memory cannot be had.
func newTensorArena(size int64) *tensorArena {
	mem := hugeAlloc(size)
	if mem == nil {
		return nil
	}
	return &tensorArena{arena{mem: mem}}
}

// alloc returns n bytes for a tensor.
func (a *tensorArena) alloc(n int64) []byte {
	if a.used+n > int64(len(a.mem)) {
		return cAlloc(n)
	}
	return a.take(n)
}

// release gives a tensor's memory back: the whole pages inside it to the
// system when it is in the arena (the rest goes with the arena).
func (a *tensorArena) release(b []byte) {
	if len(b) == 0 {
		return
	}
	p, lo := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&a.mem[0]))
	if p < lo || p >= lo+uintptr(len(a.mem)) {
		cFree(b)
		return
	}
	C.rd_huge_drop(unsafe.Pointer(&b[0]), C.size_t(len(b)))
}

// free releases the arena.
func (a *tensorArena) free() {
	if a != nil {
		hugeFree(a.mem)
		a.mem = nil
	}
}
