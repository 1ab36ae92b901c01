package api

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// pairReq is POST /v1/pair with body from addr.
func pairReq(body, addr string) *http.Request {
	req := jsonPost("/v1/pair", body)
	if addr != "" {
		req.RemoteAddr = addr
	}
	return req
}

// mustPairing makes a pairing with body and returns its answer.
func (e *env) mustPairing(body string) pairingResponse {
	e.t.Helper()
	rec := e.do(adminReq(http.MethodPost, "/v1/admin/pairings", body))
	if rec.Code != http.StatusOK {
		e.t.Fatalf("POST /v1/admin/pairings: %d %s", rec.Code, rec.Body.String())
	}
	var p pairingResponse
	decode(e.t, rec, &p)
	return p
}

func TestPairingMintsTheKeyOnce(t *testing.T) {
	e := newEnv(t)
	p := e.mustPairing(`{"client_id":"ward-3","rate_limit_per_minute":20}`)
	if !regexp.MustCompile(`^[2-9A-HJ-NP-Z]{8}$`).MatchString(p.PairingCode) {
		t.Errorf("pairing_code %q is not 8 symbols of the unambiguous alphabet", p.PairingCode)
	}
	if want := "http://example.com/app/#pair=" + p.PairingCode; p.PairURL != want {
		t.Errorf("pair_url = %q, want %q", p.PairURL, want)
	}
	if !p.ExpiresAt.Equal(t0.Add(10*time.Minute)) || p.ClientID != "ward-3" || p.Status != "active" ||
		strings.Join(p.Scopes, ",") != "infer" || p.RateLimitPerMinute != 20 {
		t.Errorf("pairing answer %+v", p)
	}
	if !strings.HasPrefix(p.QRSVG, `<svg xmlns="http://www.w3.org/2000/svg"`) || !strings.HasSuffix(p.QRSVG, "</svg>") || strings.Contains(p.QRSVG, "style=") {
		t.Errorf("qr_svg = %.120q…", p.QRSVG)
	}
	// No key exists until the code is redeemed.
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?include_revoked=true", "")), 200, `{"items":[],"count":0}`)

	// The tablet types it in lower case with a hyphen.
	e.clock.Advance(time.Minute)
	typed := strings.ToLower(p.PairingCode[:4] + "-" + p.PairingCode[4:])
	rec := e.do(pairReq(`{"code":"`+typed+`"}`, ""))
	var k keyCreateResponse
	decode(t, rec, &k)
	wantJSON(t, rec, 200, `{"api_key":"`+k.APIKey+`","api_key_hash":"`+secret.Hash(k.APIKey)+`","client_id":"ward-3","status":"active",
	  "scopes":["infer"],"rate_limit_per_minute":20,"created_at":"2026-01-02T03:05:05Z"}`)
	if rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store on an answer carrying a key", rec.Header().Get("Cache-Control"))
	}
	if !strings.HasPrefix(k.APIKey, APIKeyPrefix) {
		t.Errorf("api_key %q", k.APIKey)
	}
	wantJSON(t, e.do(inferReq(t, k.APIKey, payloadPart(simplePayload))), 200, okTextOnly)

	// Single use: a used code answers exactly as a wrong one.
	wantJSON(t, e.do(pairReq(`{"code":"`+p.PairingCode+`"}`, "")), 401,
		errJSON("unauthorized", "the pairing code is not valid: it is wrong, has expired or was already used; check it, or make a new one on the admin page (Keys, Add tablet)"))
	rec = e.do(adminReq("GET", "/v1/admin/keys", ""))
	if !strings.Contains(rec.Body.String(), `"count":1`) {
		t.Errorf("keys after a reused code: %s", rec.Body.String())
	}
	logs := e.do(adminReq("GET", "/v1/admin/logs?stream=admin", "")).Body.String()
	for _, want := range []string{`pairing code made for client \"ward-3\", valid for 10m`, `tablet paired: api key created for client \"ward-3\"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("admin log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, p.PairingCode) || strings.Contains(logs, k.APIKey) {
		t.Error("the admin log holds the code or the key")
	}
}

func TestPairingErrors(t *testing.T) {
	e := newEnv(t)
	p := e.mustPairing("")
	notValid := errJSON("unauthorized", "the pairing code is not valid: it is wrong, has expired or was already used; check it, or make a new one on the admin page (Keys, Add tablet)")
	wantJSON(t, e.do(pairReq(`{"code":"22222222"}`, "192.0.2.1:1")), 401, notValid)
	wantJSON(t, e.do(pairReq(`{"code":"ABC"}`, "192.0.2.2:1")), 400,
		errJSON("invalid_request", "code must be the 8 letters and digits shown on the admin page, for example 7KQ3-MZ2A"))
	wantJSON(t, e.do(pairReq(`{"code":"O0I1O0I1"}`, "192.0.2.2:1")), 400,
		errJSON("invalid_request", "code must be the 8 letters and digits shown on the admin page, for example 7KQ3-MZ2A"))
	wantJSON(t, e.do(pairReq(`{}`, "192.0.2.3:1")), 400, errJSON("invalid_request", "code is required"))
	wantJSON(t, e.do(pairReq(``, "192.0.2.3:1")), 400, errJSON("invalid_request", "a JSON request body is required"))
	wantJSON(t, e.do(adminReq(http.MethodPost, "/v1/admin/pairings", `{"scopes":["admin"]}`)), 400,
		errJSON("invalid_request", "scopes[0] is not a known scope; known scopes: infer"))
	wantJSON(t, e.do(httptest.NewRequest(http.MethodPost, "/v1/admin/pairings", nil)), 401,
		errJSON("unauthorized", "an admin credential is required: send X-ADMIN-SESSION or X-ADMIN-KEY"))

	// Expired: answered as a wrong code, and the pairing is gone.
	e.clock.Advance(10 * time.Minute)
	wantJSON(t, e.do(pairReq(`{"code":"`+p.PairingCode+`"}`, "192.0.2.4:1")), 401, notValid)
	wantJSON(t, e.do(pairReq(`{"code":"`+p.PairingCode+`"}`, "192.0.2.4:1")), 401, notValid)
	wantJSON(t, e.do(adminReq("GET", "/v1/admin/keys?include_revoked=true", "")), 200, `{"items":[],"count":0}`)
}

func TestPairingPendingBoundAndPublicURL(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.PublicURL = "https://replyd.clinic.lan:8443/"; o.Limits.MaxPendingPairings = 2 })
	p := e.mustPairing(`{"client_id":"a"}`)
	if want := "https://replyd.clinic.lan:8443/app/#pair=" + p.PairingCode; p.PairURL != want {
		t.Errorf("pair_url = %q, want %q", p.PairURL, want)
	}
	e.mustPairing(`{"client_id":"b"}`)
	wantJSON(t, e.do(adminReq(http.MethodPost, "/v1/admin/pairings", "")), 409,
		errJSON("conflict", "2 pairing codes are waiting to be used; use one or let them expire (they work for 10m) before making another"))
	// Redeeming one frees a place.
	if rec := e.do(pairReq(`{"code":"`+p.PairingCode+`"}`, "")); rec.Code != 200 {
		t.Fatalf("pair: %d %s", rec.Code, rec.Body.String())
	}
	e.mustPairing(`{"client_id":"c"}`)

	// Over TLS without a public URL the link is https.
	e2 := newEnv(t, func(o *Options) { o.TLS = true })
	if p := e2.mustPairing(""); !strings.HasPrefix(p.PairURL, "https://example.com/app/#pair=") {
		t.Errorf("pair_url over TLS = %q", p.PairURL)
	}
}

// TestPairingBruteForceIsThrottled drives 1,000 wrong codes, first from one
// address, then from 1,000 addresses over 17 minutes: none succeeds, the
// throttle answers 429 with Retry-After, and the real code still works once
// the window has passed.
func TestPairingBruteForceIsThrottled(t *testing.T) {
	e := newEnv(t)
	p := e.mustPairing(`{"client_id":"ward-9"}`)
	l := DefaultLimits()

	wrong := func(i int) string {
		for {
			c := fmt.Sprintf("%08d", 22222222+i)
			c = strings.NewReplacer("0", "A", "1", "B").Replace(c)
			if c != p.PairingCode {
				return c
			}
			i += 7919
		}
	}
	count := map[int]int{}
	for i := 0; i < 1000; i++ {
		rec := e.do(pairReq(`{"code":"`+wrong(i)+`"}`, "198.51.100.7:5000"))
		count[rec.Code]++
		if rec.Code == 429 {
			if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); ra < 1 || ra > 60 {
				t.Fatalf("Retry-After = %q", rec.Header().Get("Retry-After"))
			}
		}
	}
	if count[401] != l.PairAttemptsPerAddress || count[429] != 1000-l.PairAttemptsPerAddress || count[200] != 0 {
		t.Errorf("one address, 1,000 wrong codes in one minute: statuses %v, want %d×401 and the rest 429", count, l.PairAttemptsPerAddress)
	}
	// The same address in IPv6: a whole /64 is one address.
	for i := 0; i < 10; i++ {
		rec := e.do(pairReq(`{"code":"`+wrong(i)+`"}`, fmt.Sprintf("[2001:db8:1:2::%x]:5000", i+1)))
		if want := map[bool]int{true: 401, false: 429}[i < l.PairAttemptsPerAddress]; rec.Code != want {
			t.Errorf("IPv6 attempt %d from one /64: %d, want %d", i, rec.Code, want)
		}
	}

	// Spread over many addresses, the global bound holds: at most
	// PairAttemptsTotal answered attempts in each minute.
	e.clock.Advance(time.Minute)
	count = map[int]int{}
	answered := map[int64]int{} // minute -> attempts that reached the code check
	for i := 0; i < 1000; i++ {
		addr := fmt.Sprintf("10.%d.%d.%d:4000", i/65536, (i/256)%256, i%256)
		rec := e.do(pairReq(`{"code":"`+wrong(i)+`"}`, addr))
		count[rec.Code]++
		if rec.Code == 401 {
			answered[int64(e.clock.Now().Sub(t0)/time.Minute)]++
		}
		e.clock.Advance(time.Second)
	}
	if count[200] != 0 || count[429] == 0 {
		t.Errorf("1,000 addresses: statuses %v; want no 200 and some 429", count)
	}
	for m, n := range answered {
		if n > l.PairAttemptsTotal {
			t.Errorf("minute %d: %d attempts reached the code check, more than %d", m, n, l.PairAttemptsTotal)
		}
	}

	// A fresh code still pairs once the window has passed.
	p2 := e.mustPairing(`{"client_id":"ward-9"}`)
	e.clock.Advance(time.Minute)
	if rec := e.do(pairReq(`{"code":"`+p2.PairingCode+`"}`, "198.51.100.7:5000")); rec.Code != 200 {
		t.Errorf("the real code after the throttle window: %d %s", rec.Code, rec.Body.String())
	}
}

// countingLimiter is the rate limiter boxes share (store.RateLimiter; on
// PostgreSQL each call is a statement) that counts the calls per key.
type countingLimiter struct {
	store.MemoryLimiter
	mu    sync.Mutex
	calls map[string]int
}

func (l *countingLimiter) Allow(key string, limit int, now time.Time) (bool, time.Duration, error) {
	l.mu.Lock()
	l.calls[key]++
	l.mu.Unlock()
	return l.MemoryLimiter.Allow(key, limit, now)
}

// sharedLimiterStore is one box's store whose rate limits are those of all
// boxes (as through PostgreSQL).
type sharedLimiterStore struct {
	Store
	shared *countingLimiter
}

func (s sharedLimiterStore) Allow(key string, limit int, now time.Time) (bool, time.Duration, error) {
	return s.shared.Allow(key, limit, now)
}

func (s sharedLimiterStore) Refund(key string, now time.Time) error {
	return s.shared.Refund(key, now)
}

// guess is the i-th well-formed pairing code (no pairing exists in these
// tests, so every one is wrong).
func guess(i int) string {
	b := []byte(strings.Repeat(pairingAlphabet[:1], pairingCodeLen))
	for j := len(b) - 1; i > 0; j-- {
		b[j] = pairingAlphabet[i%len(pairingAlphabet)]
		i /= len(pairingAlphabet)
	}
	return string(b)
}

// TestPairingFloodFromOneAddressSparesTheSharedLimiter: two boxes share one
// rate limiter (as through PostgreSQL). 1,000 wrong codes from one address
// are refused per address in each box's memory: only the attempts that
// reach the code check (PairAttemptsPerAddress per box) are counted in the
// shared limiter, whose bound of all addresses still holds across both
// boxes.
func TestPairingFloodFromOneAddressSparesTheSharedLimiter(t *testing.T) {
	shared := &countingLimiter{calls: map[string]int{}}
	clock := &fakeClock{t: t0}
	boxes := []*env{}
	for range 2 {
		e := newEnv(t, func(o *Options) { o.Store = sharedLimiterStore{o.Store, shared}; o.Now = clock.Now })
		e.clock = clock
		boxes = append(boxes, e)
	}
	l := DefaultLimits()
	count := map[int]int{}
	for i := 0; i < 1000; i++ {
		rec := boxes[i%2].do(pairReq(`{"code":"`+guess(i)+`"}`, "198.51.100.7:5000"))
		count[rec.Code]++
	}
	if want := 2 * l.PairAttemptsPerAddress; count[401] != want || count[429] != 1000-want {
		t.Errorf("one address, 1,000 wrong codes on two boxes: statuses %v, want %d×401 (%d per box) and the rest 429", count, want, l.PairAttemptsPerAddress)
	}
	if want := map[string]int{pairGlobalKey: 2 * l.PairAttemptsPerAddress}; !maps.Equal(shared.calls, want) {
		t.Errorf("shared limiter calls %v, want %v: a refused attempt must not reach it", shared.calls, want)
	}

	// Many addresses, both boxes: the bound of all addresses is shared.
	clock.Advance(time.Minute)
	answered := 0
	for i := 0; i < 200; i++ {
		if rec := boxes[i%2].do(pairReq(`{"code":"`+guess(i)+`"}`, fmt.Sprintf("10.0.%d.%d:4000", i/256, i%256))); rec.Code == 401 {
			answered++
		}
	}
	if answered != l.PairAttemptsTotal {
		t.Errorf("200 addresses on two boxes in one minute: %d attempts reached the code check, want %d", answered, l.PairAttemptsTotal)
	}
}

// TestWrongPairingCodesAreFailedAuthentications: a wrong pairing code counts
// as a failed authentication of its address, so guessing codes and keys
// from one address share the AuthFailuresPerMinute throttle; a throttled
// address is refused pairing before any limiter is asked.
func TestWrongPairingCodesAreFailedAuthentications(t *testing.T) {
	shared := &countingLimiter{calls: map[string]int{}}
	e := newEnv(t, func(o *Options) { o.Store = sharedLimiterStore{o.Store, shared} })
	l := DefaultLimits()
	for i := 0; i < l.PairAttemptsPerAddress; i++ {
		if rec := e.do(pairReq(`{"code":"`+guess(i)+`"}`, "")); rec.Code != 401 {
			t.Fatalf("wrong code %d: %d %s", i+1, rec.Code, rec.Body.String())
		}
	}
	for i := l.PairAttemptsPerAddress; i < l.AuthFailuresPerMinute; i++ {
		if rec := e.do(inferReq(t, "rpd_wrong", payloadPart(`{"messages":[]}`))); rec.Code != 401 {
			t.Fatalf("bad key after %d failures: %d %s", i, rec.Code, rec.Body.String())
		}
	}
	rec := e.do(inferReq(t, "rpd_wrong", payloadPart(`{"messages":[]}`)))
	if rec.Code != 429 || !strings.Contains(rec.Body.String(), "failed authentications") {
		t.Errorf("after %d wrong pairing codes and %d bad keys: %d %s; want 429 for too many failed authentications",
			l.PairAttemptsPerAddress, l.AuthFailuresPerMinute-l.PairAttemptsPerAddress, rec.Code, rec.Body.String())
	}
	before := maps.Clone(shared.calls)
	e.clock.Advance(59 * time.Second) // the pairing window is over, the failures' window is not
	if rec := e.do(pairReq(`{"code":"`+guess(99)+`"}`, "")); rec.Code != 429 || !strings.Contains(rec.Body.String(), "failed authentications") {
		t.Errorf("pairing from the throttled address: %d %s", rec.Code, rec.Body.String())
	}
	if !maps.Equal(shared.calls, before) {
		t.Errorf("the throttled address's attempt reached the shared limiter: %v -> %v", before, shared.calls)
	}
}

// TestPairingQRCodeScans renders qr_svg's modules to a PNG and reads it back
// with zbarimg (Debian's zbar-tools, installed by scripts/deps.sh).
func TestPairingQRCodeScans(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.PublicURL = "https://replyd.local:8080" })
	p := e.mustPairing("")
	if got := scanQR(t, p.QRSVG); got != p.PairURL {
		t.Errorf("the QR code reads %q, want %q", got, p.PairURL)
	}
}

// scanQR draws the modules of an SVG from qrSVG into a PNG and returns what
// zbarimg (Debian's zbar-tools, installed by scripts/deps.sh) reads in it.
// Without zbarimg it skips t.
func scanQR(t *testing.T, svg string) string {
	t.Helper()
	zbar, err := exec.LookPath("zbarimg")
	if err != nil {
		t.Skip("zbarimg is not installed (scripts/deps.sh installs zbar-tools): the QR code is not decoded")
	}
	m := regexp.MustCompile(`viewBox="0 0 (\d+) (\d+)"`).FindStringSubmatch(svg)
	if m == nil {
		t.Fatalf("no viewBox in %.200q", svg)
	}
	size, _ := strconv.Atoi(m[1])
	const scale = 6
	img := image.NewGray(image.Rect(0, 0, size*scale, size*scale))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	runs := regexp.MustCompile(`M(\d+) (\d+)h(\d+)v1h-(\d+)z`).FindAllStringSubmatch(svg, -1)
	if len(runs) == 0 {
		t.Fatal("no modules in the path")
	}
	for _, r := range runs {
		x, _ := strconv.Atoi(r[1])
		y, _ := strconv.Atoi(r[2])
		w, _ := strconv.Atoi(r[3])
		for px := x * scale; px < (x+w)*scale; px++ {
			for py := y * scale; py < (y+1)*scale; py++ {
				img.SetGray(px, py, color.Gray{})
			}
		}
	}
	file := filepath.Join(t.TempDir(), "qr.png")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command(zbar, "--quiet", "--raw", "-Sdisable", "-Sqrcode.enable", file).Output()
	if err != nil {
		t.Fatalf("zbarimg: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func TestNormalizePairingCode(t *testing.T) {
	for in, want := range map[string]bool{
		"ABCD2345": true, "abcd-2345": true, " ab cd 23 45 ": true,
		"ABCD234": false, "ABCD23456": false, "ABCD234O": false, "ABCD2341": false, "ÄBCD2345": false,
		strings.Repeat("A", 100): false,
	} {
		if _, ok := normalizePairingCode(in); ok != want {
			t.Errorf("normalizePairingCode(%q) ok = %v, want %v", in, ok, want)
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		c, err := newPairingCode()
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := normalizePairingCode(c); !ok || n != c {
			t.Fatalf("newPairingCode made %q, which does not normalise to itself", c)
		}
		seen[c] = true
	}
	if len(seen) < 200 {
		t.Errorf("%d distinct codes in 200", len(seen))
	}
}

// TestClientMDPairingArithmetic: the guide's brute-force arithmetic is
// rendered from the limits the server enforces.
func TestClientMDPairingArithmetic(t *testing.T) {
	e := newEnv(t)
	md := e.do(httptest.NewRequest("GET", "/client.md", nil)).Body.String()
	for _, want := range []string{
		"Codes are 8 symbols from an\nalphabet of 32 (no 0, 1, I, O): 1.1 × 10¹²",
		"at most 5 attempts a minute",
		"up to\n5 a minute on each",
		"at most 30 a minute from all addresses together",
		"30 × (10 + 1) = 330",
		"330 × 10 / (1.1 × 10¹²)\n= 3.0 × 10⁻⁹",
		"(15768000 guesses) with 10 codes pending",
		"at most 1.4 × 10⁻⁴",
		"`Access-Control-Max-Age:\n600`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("client.md lacks %q", want)
		}
	}
	e2 := newEnv(t, func(o *Options) { o.Limits.PairAttemptsTotal = 6; o.Limits.MaxPendingPairings = 2 })
	md = e2.do(httptest.NewRequest("GET", "/client.md", nil)).Body.String()
	if !strings.Contains(md, "6 × (10 + 1) = 66") || !strings.Contains(md, "66 × 2 / (1.1 × 10¹²)\n= 1.2 × 10⁻¹⁰") {
		t.Error("client.md's arithmetic does not follow the limits")
	}
}

// TestPairingThrottleBehindATrustedProxy: behind a reverse proxy listed in
// TrustedProxies the throttle counts the addresses it reports; from any
// other peer X-Forwarded-For cannot buy fresh addresses.
func TestPairingThrottleBehindATrustedProxy(t *testing.T) {
	proxies, err := ParseTrustedProxies("10.9.0.1")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.TrustedProxies = proxies })
	per := DefaultLimits().PairAttemptsPerAddress
	try := func(peer, xff string) int {
		req := pairReq(`{"code":"22222222"}`, peer)
		req.Header.Set("X-Forwarded-For", xff)
		return e.do(req).Code
	}
	// Through the proxy, two tablets are two addresses.
	for i := 0; i < per; i++ {
		if got := try("10.9.0.1:4000", "192.168.7.10"); got != 401 {
			t.Fatalf("attempt %d from tablet A through the proxy: %d", i, got)
		}
	}
	if got := try("10.9.0.1:4000", "192.168.7.10"); got != 429 {
		t.Errorf("tablet A over its limit: %d, want 429", got)
	}
	if got := try("10.9.0.1:4000", "192.168.7.11"); got != 401 {
		t.Errorf("tablet B through the proxy: %d, want 401 (its own count)", got)
	}
	// A peer that is not a trusted proxy cannot change its address.
	for i := 0; i < per; i++ {
		try("192.0.2.50:4000", "198.51.100."+strconv.Itoa(i))
	}
	if got := try("192.0.2.50:4000", "198.51.100.99"); got != 429 {
		t.Errorf("an untrusted peer with a new X-Forwarded-For: %d, want 429", got)
	}
}
