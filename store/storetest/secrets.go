package storetest

import (
	"bytes"
	"testing"

	"github.com/replyd/replyd/store"
)

func secretsLifecycle(t *testing.T, e Env) {
	s := e.S
	a, err := s.InstallationSecret(store.SecretPseudonym)
	Must(t, err)
	b, err := s.InstallationSecret(store.SecretPseudonym)
	Must(t, err)
	if len(a) != 32 || !bytes.Equal(a, b) {
		t.Fatalf("InstallationSecret gave %x, then %x; want one 32-byte value", a, b)
	}
	other, err := s.InstallationSecret("other")
	Must(t, err)
	if bytes.Equal(a, other) {
		t.Error("two secrets are equal")
	}
	if v, ok, err := s.Secret(store.SecretPseudonym); err != nil || !ok || !bytes.Equal(v, a) {
		t.Errorf("Secret(pseudonym) = %x, %v, %v", v, ok, err)
	}
	if _, ok, err := s.Secret(store.SecretTOTP); err != nil || ok {
		t.Errorf("Secret(totp) before it is set: ok %v, %v", ok, err)
	}
	Must(t, s.SetSecret(store.SecretTOTP, []byte("totp secret")))
	Must(t, s.SetSecret(store.SecretTOTP, []byte("totp secret 2")))
	if v, ok, err := s.Secret(store.SecretTOTP); err != nil || !ok || string(v) != "totp secret 2" {
		t.Errorf("Secret(totp) = %q %v %v", v, ok, err)
	}
	Must(t, s.SetSecret(store.SecretTOTP, nil))
	if _, ok, _ := s.Secret(store.SecretTOTP); ok {
		t.Error("an empty SetSecret did not delete")
	}
	Must(t, s.SetSecret(store.SecretTOTP, nil)) // deleting nothing is fine
	_, err = s.InstallationSecret("")
	wantErr(t, "InstallationSecret(\"\")", err, store.ErrInvalid)
	wantErr(t, "SetSecret(\"\")", s.SetSecret("", []byte("x")), store.ErrInvalid)
}

// secretsConcurrentCreate: callers that race to create one secret (boxes
// starting together) all get the same value.
func secretsConcurrentCreate(t *testing.T, e Env) {
	got := make([][]byte, 16)
	errs := concurrently(len(got), func(i int) error {
		var err error
		got[i], err = e.S.InstallationSecret("raced")
		return err
	})
	for i, err := range errs {
		Must(t, err)
		if !bytes.Equal(got[i], got[0]) {
			t.Fatalf("caller %d got %x, caller 0 got %x", i, got[i], got[0])
		}
	}
}
