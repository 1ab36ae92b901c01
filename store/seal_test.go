package store

import "testing"

func TestSealBindsRow(t *testing.T) {
	key, err := newUserKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := seal(key, []byte("row-1"), []byte("text"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := unseal(key, []byte("row-1"), s); err != nil || string(p) != "text" {
		t.Fatalf("unseal = %q, %v", p, err)
	}
	if _, err := unseal(key, []byte("row-2"), s); err == nil {
		t.Error("a ciphertext opened in another row")
	}
	other, _ := newUserKey()
	if _, err := unseal(other, []byte("row-1"), s); err == nil {
		t.Error("a ciphertext opened with another user's key")
	}
}
