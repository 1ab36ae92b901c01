package testutil

import "math/rand/v2"

// PageSize is the page size of the data files the damage tests write
// (bbolt's default on Linux, the OS page).
const PageSize = 4096

// OverwritePages returns a copy of file with n pages of PageSize bytes
// overwritten with random bytes, chosen by rng in the middle half of the
// first used pages (bbolt grows a file ahead of its pages: damage beyond
// them changes nothing): issue 43's "50 random pages overwritten". The
// store/bolt and cmd/replyd damage tests use it.
func OverwritePages(file []byte, used, n int, rng *rand.Rand) []byte {
	out := append([]byte(nil), file...)
	for range n {
		p := used/4 + rng.IntN(used/2)
		for i := range PageSize {
			out[p*PageSize+i] = byte(rng.Uint32())
		}
	}
	return out
}
