package whisper

/*
#cgo LDFLAGS: -lopenblas -lm
#include <stdlib.h>
#include <cblas.h>
#include "kernels.h"

// OpenBLAS's pthread server stops its threads with this; the next threaded
// call starts them again (driver/others/blas_server.c).
int blas_thread_shutdown_(void);
*/
import "C"

import (
	"os"
	"strconv"
	"sync"
	"unsafe"
)

// cAlloc returns n bytes of C memory, outside the Go heap, so that model
// weights do not count towards the garbage collector's heap goal. The
// memory must be released with cFree; it returns nil when malloc fails.
func cAlloc(n int64) []byte {
	if n <= 0 {
		return []byte{}
	}
	p := C.malloc(C.size_t(n))
	if p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// cFree releases memory from cAlloc.
func cFree(b []byte) {
	if cap(b) > 0 {
		C.free(unsafe.Pointer(&b[:1][0]))
	}
}

// blasThreadCap is the most threads OpenBLAS is told to run: the
// OPENBLAS_NUM_THREADS the admin set (OpenBLAS reads it only when it is
// loaded; replyd's own openblas_set_num_threads would otherwise override
// it), or 0 for no cap. scripts/test-arm64.sh runs the arm64 tests with 2
// (the emulated machine's cores).
var blasThreadCap = parseBLASThreadCap(os.Getenv("OPENBLAS_NUM_THREADS"))

func parseBLASThreadCap(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// setBLASThreads sets the number of threads OpenBLAS uses for every later
// product in this process, at most blasThreadCap.
func setBLASThreads(n int) {
	if blasThreadCap > 0 && n > blasThreadCap {
		n = blasThreadCap
	}
	C.openblas_set_num_threads(C.int(n))
}

// blasThreadsNow is the number of threads OpenBLAS runs now.
func blasThreadsNow() int {
	return int(C.openblas_get_num_threads())
}

// blasMu orders OpenBLAS products (readers) against stopBLASThreads.
var blasMu sync.RWMutex

// stopBLASThreads ends OpenBLAS's worker threads; the next product that
// wants them starts them again (tens of microseconds). After a product a
// worker spins, yielding, for about 2^28 cycles (0.1 s) before it sleeps;
// on a small machine that spinning takes a core from the decoder's own
// threads, which run right after the encoder's last product.
func stopBLASThreads() {
	blasMu.Lock()
	defer blasMu.Unlock()
	C.blas_thread_shutdown_()
}

// sgemmNT computes c[m][n] (row stride ldc) = a[m][k] (stride lda) ·
// b[n][k]ᵀ (stride ldb), adding to c when accumulate is true.
func sgemmNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	if m == 0 || n == 0 {
		return
	}
	beta := C.float(0)
	if accumulate {
		beta = 1
	}
	blasMu.RLock()
	defer blasMu.RUnlock()
	C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, C.CblasTrans, C.blasint(m), C.blasint(n), C.blasint(k),
		1, (*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb), beta, (*C.float)(&c[0]), C.blasint(ldc))
}

// sgemmNN computes c[m][n] (stride ldc) = a[m][k] (stride lda) · b[k][n]
// (stride ldb).
func sgemmNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	blasMu.RLock()
	defer blasMu.RUnlock()
	C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, C.CblasNoTrans, C.blasint(m), C.blasint(n), C.blasint(k),
		1, (*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb), 0, (*C.float)(&c[0]), C.blasint(ldc))
}

// dequant writes n values of type typ from src to dst (len(dst) ≥ n).
func dequant(typ ggmlType, src []byte, dst []float32, n int) {
	if n == 0 {
		return
	}
	C.rd_dequant(C.int(typ), (*C.uint8_t)(&src[0]), (*C.float)(&dst[0]), C.long(n))
}

// gemvRows computes y[t*ldy+r] = row r of w · x[t] for r in [r0, r1) and
// t in [0, n); tmp holds w.cols floats.
func gemvRows(w *weight, x []float32, n int, y []float32, ldy, r0, r1 int, tmp []float32) {
	if r0 >= r1 || n == 0 {
		return
	}
	var raw unsafe.Pointer
	if w.typ == typeF32 {
		raw = unsafe.Pointer(&w.f32[0])
	} else {
		raw = unsafe.Pointer(&w.raw[0])
	}
	C.rd_gemv_rows(C.int(w.typ), (*C.uint8_t)(raw), C.long(w.rowBytes), (*C.float)(&x[0]), C.int(n), C.int(w.cols),
		(*C.float)(&y[0]), C.int(ldy), C.int(r0), C.int(r1), (*C.float)(&tmp[0]))
}

// quantizeQ8 quantises x (a multiple of 32 values) to q8_0 blocks: int8
// values in q, per block the scale in d and the scale times the block's sum
// in s (rd_quantize_q8).
func quantizeQ8(x []float32, q []int8, d, s []float32) {
	if len(x) == 0 {
		return
	}
	C.rd_quantize_q8((*C.float)(&x[0]), C.long(len(x)), (*C.int8_t)(&q[0]), (*C.float)(&d[0]), (*C.float)(&s[0]))
}

// gemvRowsQ8 is gemvRows for a quantised w and n activation rows that
// quantizeQ8 quantised to q, d and s.
func gemvRowsQ8(w *weight, q []int8, d, s []float32, n int, y []float32, ldy, r0, r1 int) {
	if r0 >= r1 || n == 0 {
		return
	}
	C.rd_gemvq_rows(C.int(w.typ), (*C.uint8_t)(&w.raw[0]), C.long(w.rowBytes), (*C.int8_t)(&q[0]), (*C.float)(&d[0]),
		(*C.float)(&s[0]), C.int(n), C.int(w.cols), (*C.float)(&y[0]), C.int(ldy), C.int(r0), C.int(r1))
}

// softmaxRows replaces n rows of length l (stride ld) of x by softmax(scale·row);
// with valid non-nil, row i keeps only its first valid[i] entries.
func softmaxRows(x []float32, n, l, ld int, scale float32, valid []int32) {
	if n == 0 {
		return
	}
	var vp *C.int
	if valid != nil {
		vp = (*C.int)(unsafe.Pointer(&valid[0]))
	}
	C.rd_softmax_rows((*C.float)(&x[0]), C.int(n), C.int(l), C.int(ld), C.float(scale), vp)
}

// attendPart runs part p of parts of the attention of n queries q over K
// and V (rows of d elements of es bytes: 4 for float32, 2 for halves);
// see rd_attention_part. scores holds nh rows of ld floats.
func attendPart(q []float32, k, v unsafe.Pointer, es, n int, valid []int32, d, hd, p, parts int, scale float32,
	scores []float32, ld int, mx, l, o []float32) {
	C.rd_attention_part((*C.float)(&q[0]), k, v, C.int(es), C.int(n), (*C.int)(unsafe.Pointer(&valid[0])), C.int(d), C.int(hd),
		C.int(p), C.int(parts), C.float(scale), (*C.float)(&scores[0]), C.int(ld), (*C.float)(&mx[0]), (*C.float)(&l[0]),
		(*C.float)(&o[0]))
}

// attendMerge writes the n queries' attention ([n][d]) to out from the
// parts of attendPart.
func attendMerge(n, parts, d, hd int, mx, l, o, out []float32) {
	C.rd_attention_merge(C.int(n), C.int(parts), C.int(d), C.int(hd), (*C.float)(&mx[0]), (*C.float)(&l[0]), (*C.float)(&o[0]),
		(*C.float)(&out[0]))
}

// toF16 rounds src to IEEE halves in dst (to nearest, ties to even).
func toF16(src []float32, dst []uint16) {
	if len(src) == 0 {
		return
	}
	C.rd_f32_to_f16((*C.float)(&src[0]), (*C.uint16_t)(&dst[0]), C.long(len(src)))
}

// fromF16 converts IEEE halves to float32.
func fromF16(src []uint16, dst []float32) {
	if len(src) == 0 {
		return
	}
	C.rd_f16_to_f32((*C.uint16_t)(&src[0]), (*C.float)(&dst[0]), C.long(len(src)))
}

// sumExp returns Σ exp(x[i] - mx); every x[i] must be at most mx.
func sumExp(x []float32, mx float32) float64 {
	if len(x) == 0 {
		return 0
	}
	return float64(C.rd_sum_exp((*C.float)(&x[0]), C.int(len(x)), C.float(mx)))
}

// gelu applies GELU (tanh approximation) in place.
func gelu(x []float32) {
	if len(x) == 0 {
		return
	}
	C.rd_gelu((*C.float)(&x[0]), C.long(len(x)))
}

// f16ToF32 converts little-endian half-precision values in src to dst.
func f16ToF32(src []byte, dst []float32) {
	if len(dst) == 0 {
		return
	}
	C.rd_dequant(C.RD_F16, (*C.uint8_t)(&src[0]), (*C.float)(&dst[0]), C.long(len(dst)))
}

// parallel runs fn over [0, n) split into at most threads contiguous
// ranges, one goroutine per range, and waits for all of them.
func parallel(threads, n int, fn func(lo, hi int)) {
	if threads <= 1 || n < 2 {
		fn(0, n)
		return
	}
	if threads > n {
		threads = n
	}
	// The caller runs the first range itself: one goroutine fewer to wake.
	var wg sync.WaitGroup
	for i := 1; i < threads; i++ {
		lo, hi := i*n/threads, (i+1)*n/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	fn(0, n/threads)
	wg.Wait()
}
