package secret

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
)

func TestHash(t *testing.T) {
	// The SHA-256 of "abc" (FIPS 180-2, appendix B.1).
	if got, want := Hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Fatalf("Hash(abc) = %s, want %s", got, want)
	}
}

func TestToken(t *testing.T) {
	a, err := Token("rpd_")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Token("rpd_")
	if a == b || !strings.HasPrefix(a, "rpd_") {
		t.Fatalf("tokens %q and %q", a, b)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(a, "rpd_"))
	if err != nil || len(raw) != TokenBytes {
		t.Fatalf("token body decodes to %d bytes (%v)", len(raw), err)
	}
}

func TestSymbols(t *testing.T) {
	const alphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"
	counts := map[rune]int{}
	for i := 0; i < 1000; i++ {
		c, err := Symbols(alphabet, 8)
		if err != nil {
			t.Fatal(err)
		}
		if len(c) != 8 {
			t.Fatalf("Symbols(8) = %q", c)
		}
		for _, r := range c {
			if !strings.ContainsRune(alphabet, r) {
				t.Fatalf("%q has %q, not in the alphabet", c, r)
			}
			counts[r]++
		}
	}
	for _, r := range alphabet {
		// 8000 symbols over 32: about 250 each.
		if n := counts[r]; n < 170 || n > 340 {
			t.Errorf("symbol %q: %d times in 8000", r, n)
		}
	}
	if _, err := Symbols("A", 8); err == nil {
		t.Error("an alphabet of one symbol did not fail")
	}
}

func TestDigits(t *testing.T) {
	re := regexp.MustCompile(`^[0-9]{8}$`)
	seen := map[string]bool{}
	counts := [10]int{}
	for i := 0; i < 2000; i++ {
		d, err := Digits(8)
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(d) {
			t.Fatalf("Digits(8) = %q", d)
		}
		seen[d] = true
		counts[d[0]-'0']++
	}
	if len(seen) < 1990 {
		t.Errorf("only %d distinct codes in 2000", len(seen))
	}
	for digit, n := range counts {
		// Each leading digit, zero included, about 200 times.
		if n < 120 || n > 290 {
			t.Errorf("leading digit %d: %d times in 2000", digit, n)
		}
	}
	if _, err := Digits(0); err == nil {
		t.Error("Digits(0) did not fail")
	}
}

func TestPseudonym(t *testing.T) {
	k1, k2 := []byte("installation one"), []byte("installation two")
	p := Pseudonym(k1, "patient-0042")
	if p != PseudonymOfHash(k1, Hash("patient-0042")) {
		t.Fatal("Pseudonym and PseudonymOfHash disagree")
	}
	if p == Pseudonym(k2, "patient-0042") || p == Pseudonym(k1, "patient-0043") {
		t.Fatal("pseudonyms collide across keys or ids")
	}
	if p == Hash("patient-0042") || len(p) != 64 {
		t.Fatalf("pseudonym %q is the bare hash or not 64 hex", p)
	}
	// RFC 4231 test case 2: HMAC-SHA-256 with key "Jefe".
	if got, want := PseudonymOfHash([]byte("Jefe"), "what do ya want for nothing?"),
		"5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"; got != want {
		t.Fatalf("HMAC = %s, want %s", got, want)
	}
}
