package secret

import (
	"strings"
	"testing"
)

func TestAdminKeyHash(t *testing.T) {
	const key = "correct-horse-battery-staple-42"
	h, err := HashAdminKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, key) {
		t.Fatalf("stored form %q", h)
	}
	h2, _ := HashAdminKey(key)
	if h == h2 {
		t.Fatal("two hashes of one key are equal: no salt")
	}
	for _, tc := range []struct {
		key, stored string
		want        bool
	}{
		{key, h, true},
		{key + "x", h, false},
		{"", h, false},
		{key, Hash(key), true}, // the legacy SHA-256 form
		{key + "x", Hash(key), false},
	} {
		got, err := CheckAdminKey(tc.key, tc.stored)
		if err != nil || got != tc.want {
			t.Errorf("CheckAdminKey(%q, %.20s…) = %v, %v; want %v", tc.key, tc.stored, got, err, tc.want)
		}
	}
	if !IsLegacyAdminKeyHash(Hash(key)) || IsLegacyAdminKeyHash(h) {
		t.Error("IsLegacyAdminKeyHash")
	}
	for _, bad := range []string{"", "plain", "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$", "$argon2id$v=18$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=19$m=99999999,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "$bcrypt$x$y$z$w"} {
		if ok, err := CheckAdminKey(key, bad); ok || err == nil {
			t.Errorf("CheckAdminKey(%q) = %v, %v; want an error", bad, ok, err)
		}
	}
}

func TestAdminKeyStrength(t *testing.T) {
	gen, _ := Token("rdadm_")
	for _, ok := range []string{
		gen,
		"fault-admin-0123456789abcdef0123456789abcdef"[:12] + "8f3a91c27d5e4b06a1f9c3d2e7b8a450",
		"loadtest-admin-5f1e9a0c3b7d2e4f6a8c0b1d3e5f7a9c",
		"Zq7#mP2!vL9xR4@tK8wN", // 20 random characters
		"correct horse battery staple",
		"tX3pQ8vL2mZ9kR4wJ7nB", // 20 random alphanumerics
	} {
		if err := CheckAdminKeyStrength(ok); err != nil {
			t.Errorf("%q refused (%.0f bits): %v", ok, EstimateBits(ok), err)
		}
	}
	for _, weak := range []string{
		"aaaaaaaaaaaaaaaa",     // the example: too short
		"aaaaaaaaaaaaaaaaaaaa", // 20 of one character
		"abababababababababab",
		"abcdefghijklmnopqrstuvwxyz",
		"01234567890123456789",
		"passwordpassword1234",
		"adminadminadminadmin",
		"qwertyqwertyqwertyqwerty",
		"short",
	} {
		err := CheckAdminKeyStrength(weak)
		if err == nil {
			t.Errorf("%q accepted (%.0f bits)", weak, EstimateBits(weak))
		} else if strings.Contains(err.Error(), weak) {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
}

// BenchmarkAdminKeyCheck compares what one admin request costs: the first
// check of a key (Argon2id) and every later one (its SHA-256 compared with
// the remembered one, as api does).
func BenchmarkAdminKeyCheck(b *testing.B) {
	const key = "rdadm_benchmark-key-3f9a7c1e5b2d4f60"
	stored, err := HashAdminKey(key)
	if err != nil {
		b.Fatal(err)
	}
	remembered := Hash(key)
	b.Run("argon2id", func(b *testing.B) {
		for b.Loop() {
			if ok, err := CheckAdminKey(key, stored); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		for b.Loop() {
			if !Equal(Hash(key), remembered) {
				b.Fatal("mismatch")
			}
		}
	})
}
