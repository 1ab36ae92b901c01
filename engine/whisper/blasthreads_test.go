package whisper

import "testing"

func TestBLASThreadCap(t *testing.T) {
	for v, want := range map[string]int{"": 0, "1": 1, "4": 4, "0": 0, "-2": 0, "two": 0} {
		if got := parseBLASThreadCap(v); got != want {
			t.Errorf("parseBLASThreadCap(%q) = %d, want %d", v, got, want)
		}
	}
	// The admin's OPENBLAS_NUM_THREADS caps what replyd asks for.
	defer func(c int) { blasThreadCap = c; setBLASThreads(1) }(blasThreadCap)
	blasThreadCap = 1
	setBLASThreads(3)
	if n := blasThreadsNow(); n != 1 {
		t.Errorf("with the cap at 1, OpenBLAS runs %d threads after asking for 3", n)
	}
	blasThreadCap = 0
	setBLASThreads(2)
	if n := blasThreadsNow(); n != 2 {
		t.Errorf("without a cap, OpenBLAS runs %d threads after asking for 2", n)
	}
}
