package fault

// Admin login that cannot be burned or guessed (issue 10, point 3).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

const wrongCode = `{"error":"unauthorized","message":"the code is wrong, has expired, was already used, or was not asked for from this device"}`

// verifyFrom tries code from the loopback address ip.
func verifyFrom(t *testing.T, p *testutil.Replyd, ip, code string) (int, string) {
	t.Helper()
	resp := p.Call(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/verify", From: ip, JSON: map[string]string{"code": code}})
	return resp.Status, strings.TrimSpace(string(resp.Body))
}

// TestOTPCannotBeBurnedOrGuessed: an attacker on another address asks for
// codes and guesses (the administrator's own code among the guesses) while
// the administrator logs in: the administrator's code is neither replaced
// nor burned, every wrong answer is the same, and 3 wrong codes pause the
// attacker's address only: the administrator's next code works at once,
// and the admin key keeps working.
func TestOTPCannotBeBurnedOrGuessed(t *testing.T) {
	inbox := testutil.NewOTPInbox(t)
	p := startProc(t, replydproc.Options{DataDir: t.TempDir(), Env: map[string]string{
		"REPLYD_OTP_CHANNEL":         "webhook",
		"REPLYD_OTP_WEBHOOK_URL":     inbox.URL + "/otp",
		"REPLYD_OTP_RESEND_INTERVAL": "1s",
	}})
	p.WaitReady()
	const admin, attacker = "127.0.4.1", "127.0.4.66"

	p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/send", From: admin}, 200)
	firstSend := time.Now()
	code := inbox.Next(t, 1)
	if !regexp.MustCompile(`^[0-9]{8}$`).MatchString(code) {
		t.Fatalf("code %q is not 8 digits", code)
	}
	// The attacker's send is answered like anyone's: it does not reveal
	// that a code is outstanding, and it does not replace the admin's.
	body := p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/send", From: attacker}, 200)
	if !strings.Contains(string(body), `"sent":true`) {
		t.Errorf("attacker's send: %s", body)
	}
	// Three wrong codes from the attacker, the admin's real code among
	// them: from the wrong address it does not work, and it is not spent.
	for _, guess := range []string{code, fmt.Sprintf("%08d", (atoi(code)+1)%100000000), "12345678"} {
		if status, b := verifyFrom(t, p, attacker, guess); status != 401 || b != wrongCode {
			t.Errorf("attacker's guess: %d %s", status, b)
		}
	}
	// They paused the attacker's address ...
	status, b := verifyFrom(t, p, attacker, "12345679")
	if status != 429 || !strings.Contains(b, "from this address") {
		t.Errorf("the attacker after 3 wrong codes: %d %s", status, b)
	}
	// ... and not the administrator's, whose code works at once.
	if status, b := verifyFrom(t, p, admin, code); status != 200 || !strings.Contains(b, "session_token") {
		t.Fatalf("the admin's own code after the attacker's guesses: %d %s", status, b)
	}
	// A code from an address that asked for none gets the same answer as a
	// wrong one.
	if status, b := verifyFrom(t, p, "127.0.4.77", "00000000"); status != 401 || b != wrongCode {
		t.Errorf("no code outstanding: %d %s", status, b)
	}
	// The administrator can log in again right away.
	time.Sleep(time.Until(firstSend.Add(1100 * time.Millisecond)))
	p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/send", From: admin}, 200)
	if status, b := verifyFrom(t, p, admin, inbox.Next(t, 3)); status != 200 {
		t.Errorf("the admin's second code while the attacker is paused: %d %s", status, b)
	}
	// The admin key is never delayed, from any address.
	p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/keys", Header: p.AdminHeader(), From: attacker}, 200)
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestConsoleCodeNeverInJournal: with the console channel and no terminal
// (as under systemd, where stderr is the journal), the code goes to a file
// in the data directory readable only by replyd's user; the output only
// says where.
func TestConsoleCodeNeverInJournal(t *testing.T) {
	data := t.TempDir()
	p := startProc(t, replydproc.Options{DataDir: data, Env: map[string]string{"REPLYD_OTP_CHANNEL": "console"}})
	p.WaitReady()
	p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/send"}, 200)
	file := filepath.Join(data, "otp-code.txt")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no code file: %v\n%s", err, replydproc.Tail(p.Output(), 20))
	}
	m := regexp.MustCompile(`code is ([0-9]{8})`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("the file holds no code: %q", b)
	}
	code := string(m[1])
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", file, fi.Mode().Perm())
	}
	out := p.Output()
	if strings.Contains(out, code) {
		t.Errorf("the code appears in the process output (the journal)")
	}
	if !strings.Contains(out, file) {
		t.Errorf("the output does not say where the code is:\n%s", replydproc.Tail(out, 20))
	}
	p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/verify", JSON: map[string]string{"code": code}}, 200)
}

// TestTOTPLogin: with REPLYD_OTP_CHANNEL=totp nothing is sent; once an
// authenticator app is enrolled (admin auth), its current code logs in
// once.
func TestTOTPLogin(t *testing.T) {
	p := startProc(t, replydproc.Options{DataDir: t.TempDir(), Env: map[string]string{"REPLYD_OTP_CHANNEL": "totp"}})
	p.WaitReady()
	body := p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/send"}, 200)
	if strings.TrimSpace(string(body)) != `{"sent":false,"channel":"totp"}` {
		t.Errorf("send: %s", body)
	}
	p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/totp/enroll"}, 401)
	var en struct {
		Secret     string `json:"secret"`
		OTPAuthURL string `json:"otpauth_url"`
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/totp/enroll", Header: p.AdminHeader()}, 200), &en); err != nil || en.Secret == "" ||
		!strings.HasPrefix(en.OTPAuthURL, "otpauth://totp/") {
		t.Fatalf("enroll: %+v %v", en, err)
	}
	code, err := totp.GenerateCode(en.Secret, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var login struct {
		SessionToken string `json:"session_token"`
	}
	if err := json.Unmarshal(p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/otp/verify", JSON: map[string]string{"code": code}}, 200), &login); err != nil {
		t.Fatal(err)
	}
	if status, b := verifyFrom(t, p, "127.0.0.1", code); status != 401 || b != wrongCode {
		t.Errorf("the same code again: %d %s", status, b)
	}
	// The session works, but alone it cannot replace the authenticator (a
	// stolen session must not become a lasting login).
	p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/keys", Header: map[string]string{"X-ADMIN-SESSION": login.SessionToken}}, 200)
	p.Must(replydproc.Request{Method: http.MethodPost, Path: "/v1/admin/totp/enroll", Header: map[string]string{"X-ADMIN-SESSION": login.SessionToken}}, 403)
	if strings.Contains(p.Output(), en.Secret) {
		t.Error("the TOTP secret appears in the output")
	}
}

// TestWeakAdminKeyRefused: a configured admin key under 20 characters or
// about 80 bits stops start-up with a message saying why.
func TestWeakAdminKeyRefused(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"aaaaaaaaaaaaaaaa", "use at least 20"},
		{"abcdefghijklmnopqrstuvwxyz", "too easy to guess"},
	} {
		p := startProc(t, replydproc.Options{DataDir: t.TempDir(), AdminKey: tc.key})
		if code := p.WaitExit(startupLimit); code == 0 {
			t.Fatalf("replyd started with the admin key %q", tc.key)
		}
		out := p.Output()
		if !strings.Contains(out, "REPLYD_ADMIN_KEY") || !strings.Contains(out, tc.want) || strings.Contains(out, tc.key) {
			t.Errorf("key %q: output %q", tc.key, replydproc.Tail(out, 5))
		}
	}
}

// TestAdminKeyGuessesThrottled: wrong admin keys from one address get 401
// ten times a minute, then 429 (without running the KDF); the admin key,
// already verified, is still served from that address.
func TestAdminKeyGuessesThrottled(t *testing.T) {
	p := startProc(t, replydproc.Options{DataDir: t.TempDir()})
	p.WaitReady()
	const from = "127.0.4.9"
	p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/keys", Header: p.AdminHeader(), From: from}, 200)
	for i := 0; i < 10; i++ {
		p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/keys", Header: map[string]string{"X-ADMIN-KEY": fmt.Sprintf("guess-%d-%s", i, replydproc.RandHex(8))}, From: from}, 401)
	}
	start := time.Now()
	p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/keys", Header: map[string]string{"X-ADMIN-KEY": "guess-" + replydproc.RandHex(8)}, From: from}, 429)
	t.Logf("the throttled guess was answered in %s", time.Since(start))
	p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/keys", Header: p.AdminHeader(), From: from}, 200)
	p.Must(replydproc.Request{Method: http.MethodGet, Path: "/v1/admin/keys", Header: map[string]string{"X-ADMIN-KEY": "guess-elsewhere"}, From: "127.0.4.10"}, 401)
}
