package fault

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replyd/replyd/internal/replydproc"
	"github.com/replyd/replyd/internal/testutil"
)

// haproxyCheck is how long HAProxy takes to mark a stopped box down with
// scripts/haproxy.cfg's checks (inter 1s, fall 2), with a second to spare.
const haproxyCheck = 3 * time.Second

// lb is HAProxy (scripts/haproxy.cfg, Debian's binary) in front of a cluster.
type lb struct {
	t      *testing.T
	url    string
	client *http.Client // the tablet at 127.0.0.2
	pool   *x509.CertPool
	out    *testutil.SyncBuffer
}

// startHAProxy runs scripts/haproxy.cfg with a fresh self-signed
// certificate in front of c's boxes, and a client that trusts it and
// connects from 127.0.0.2 (the "tablet"; HAProxy reaches the boxes from
// 127.0.0.1). env adds NAME=value settings of the file (such as
// REPLYD_LB_TUNNEL_TIMEOUT). It waits until HAProxy answers /healthz.
func startHAProxy(t *testing.T, c *cluster, env ...string) *lb {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		for _, p := range []string{"/usr/sbin/haproxy", "/usr/local/sbin/haproxy"} {
			if _, err := os.Stat(p); err == nil {
				bin = p
			}
		}
	}
	if bin == "" {
		if os.Getenv("REPLYD_REQUIRE_POSTGRES") != "" {
			t.Fatal("haproxy is not installed (scripts/deps.sh installs it)")
		}
		t.Skip("SKIPPING: haproxy is not installed; run scripts/deps.sh")
	}
	dir := t.TempDir()
	certPEM, pool := selfSigned(t)
	certFile := filepath.Join(dir, "lb.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := replydproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	l := &lb{t: t, url: "https://" + addr, out: &testutil.SyncBuffer{}}
	cmd := exec.Command(bin, "-db", "-f", filepath.Join(repoRoot, "scripts", "haproxy.cfg"))
	cmd.Env = append(os.Environ(), "REPLYD_LB_BIND="+addr, "REPLYD_LB_CERT="+certFile,
		"REPLYD_BOX_A="+c.a.Addr, "REPLYD_BOX_B="+c.b.Addr)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = l.out, l.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("haproxy output:\n%s", replydproc.Tail(l.out.String(), 40))
		}
	})
	l.pool = pool
	l.client = l.clientFrom("127.0.0.2")
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-done:
			t.Fatalf("haproxy exited:\n%s", l.out.String())
		default:
		}
		if resp, err := l.do(http.MethodGet, "/healthz", nil, "", nil); err == nil && resp.Status == 200 {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy did not answer /healthz within a minute:\n%s", l.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clientFrom returns a client that trusts HAProxy's certificate and
// connects from the loopback address ip: a tablet of its own.
func (l *lb) clientFrom(ip string) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext:       dialer.DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: l.pool, ServerName: "localhost", MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}}
}

// do sends one request through HAProxy from the tablet at 127.0.0.2.
func (l *lb) do(method, path string, header map[string]string, ctype string, body []byte) (replydproc.Response, error) {
	return l.doFrom(l.client, method, path, header, ctype, body)
}

// doFrom sends one request through HAProxy with client.
func (l *lb) doFrom(client *http.Client, method, path string, header map[string]string, ctype string, body []byte) (replydproc.Response, error) {
	req, err := http.NewRequest(method, l.url+path, bytes.NewReader(body))
	if err != nil {
		return replydproc.Response{}, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := client.Do(req)
	if err != nil {
		return replydproc.Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return replydproc.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// infer sends one turn of dialog (its lines so far) for apiKey through
// HAProxy and fails the test unless it is answered 200.
func (l *lb) infer(apiKey, dialog string, lines []string) {
	l.t.Helper()
	msgs := []map[string]any{}
	for i, line := range lines {
		role := "speaker"
		if i%2 == 1 {
			role = "disabled_person"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": line})
	}
	payload, _ := json.Marshal(map[string]any{"dialog_id": dialog, "messages": msgs, "options": map[string]any{"max_candidates": 2}})
	ct, body := replydproc.InferForm(payload, nil)
	resp, err := l.do(http.MethodPost, "/v1/infer", map[string]string{"X-API-KEY": apiKey, "X-Forwarded-For": "203.0.113.66"}, ct, body)
	if err != nil || resp.Status != 200 {
		l.t.Fatalf("infer through HAProxy: %d %v %s", resp.Status, err, resp.Body)
	}
}

// selfSigned makes a certificate for localhost and 127.0.0.1 and returns
// it with its key as one PEM (HAProxy's crt format) and a pool trusting it.
func selfSigned(t *testing.T) ([]byte, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "replyd test load balancer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...), pool
}

// cachedTokens reads replyd_llm_tokens_total{kind="cached"} from p's
// /metrics: the prompt tokens its dialog prefix cache has saved so far.
func cachedTokens(t *testing.T, p *testutil.Replyd) float64 {
	t.Helper()
	body := p.Must(replydproc.Request{Path: "/metrics", Header: p.AdminHeader()}, 200)
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `replyd_llm_tokens_total{kind="cached"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0 // no inference yet on this box
}

// nodesOf returns, per API key hash, the nodes of its infer log entries.
func nodesOf(t *testing.T, p *testutil.Replyd) map[string]map[string]int {
	t.Helper()
	body := p.Must(replydproc.Request{Path: "/v1/admin/logs?stream=infer&limit=1000", Header: p.AdminHeader()}, 200)
	var logs struct {
		Items []struct {
			ResourceID string `json:"resource_id"`
			Node       string `json:"node"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &logs); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	for _, e := range logs.Items {
		if out[e.ResourceID] == nil {
			out[e.ResourceID] = map[string]int{}
		}
		out[e.ResourceID][e.Node]++
	}
	return out
}

// TestHAProxyRoutesByKey puts scripts/haproxy.cfg (Debian's HAProxy,
// terminating TLS) in front of two replyd boxes on one PostgreSQL and shows
// that every request of one API key lands on one box (the node in the
// shared logs), that a dialog's follow-up turn reuses that box's prefix
// cache (tokens counted in its metrics, none on the other box), and that
// stopping the box moves its tablets to the other one without an error once
// HAProxy's checks have seen it go, where the dialog warms up again.
func TestHAProxyRoutesByKey(t *testing.T) {
	c := startCluster(t, map[string]string{"REPLYD_TRUSTED_PROXIES": "127.0.0.1"})
	l := startHAProxy(t, c)
	boxes := map[string]*testutil.Replyd{"box-a": c.a, "box-b": c.b}
	other := map[string]string{"box-a": "box-b", "box-b": "box-a"}

	// Keys until both boxes hold some: the hash decides, not the test.
	keys := []testutil.CreatedKey{}
	var home map[string]map[string]int
	for i := 0; i < 40; i++ {
		k := c.a.CreateKey(fmt.Sprintf("tablet-%d", i))
		keys = append(keys, k)
		for turn := range 3 {
			l.infer(k.APIKey, "", []string{fmt.Sprintf("Line %d of tablet %d.", turn, i)})
		}
		home = nodesOf(t, c.a)
		seen := map[string]bool{}
		for _, k := range keys {
			for n := range home[k.APIKeyHash] {
				seen[n] = true
			}
		}
		if len(keys) >= 4 && len(seen) == 2 {
			break
		}
	}
	keyHome := map[string]string{} // api key -> its box
	for _, k := range keys {
		nodes := home[k.APIKeyHash]
		if len(nodes) != 1 {
			t.Fatalf("key %s…: its requests landed on %v, want one box", k.APIKeyHash[:8], nodes)
		}
		for n, count := range nodes {
			if count != 3 {
				t.Errorf("key %s…: %d of 3 requests logged", k.APIKeyHash[:8], count)
			}
			keyHome[k.APIKey] = n
		}
	}
	used := map[string]bool{}
	for _, n := range keyHome {
		used[n] = true
	}
	if len(used) != 2 {
		t.Fatalf("%d keys all landed on %v: the hash did not spread them", len(keys), used)
	}

	// The warm dialog: turn 2 reuses turn 1 on the key's box only. Every
	// prompt may reuse the opening it shares with the one before it (the
	// system message), so a warm turn is one that reuses more than that.
	tablet := keys[0]
	x := keyHome[tablet.APIKey]
	bx, by := boxes[x], boxes[other[x]]
	dialog := []string{"Good morning, did you sleep well?", "Not really, the ward was noisy.", "I am sorry to hear that. Would you like some tea?"}
	cx, cy := cachedTokens(t, bx), cachedTokens(t, by)
	l.infer(tablet.APIKey, "dialog-1", dialog[:1])
	cx1, cy1 := cachedTokens(t, bx), cachedTokens(t, by)
	l.infer(tablet.APIKey, "dialog-1", dialog)
	cx2, cy2 := cachedTokens(t, bx), cachedTokens(t, by)
	if cx2-cx1 <= cx1-cx || cy2 != cy || cy1 != cy {
		t.Errorf("cached prompt tokens: %s (the key's box) %v -> %v -> %v, %s %v -> %v -> %v; want the second turn to reuse more than the first, on %s alone",
			x, cx, cx1, cx2, other[x], cy, cy1, cy2, x)
	}

	// Stop the key's box; after HAProxy's check interval every request is
	// answered, by the other box.
	bx.Stop()
	time.Sleep(haproxyCheck)
	for i := range 6 {
		l.infer(tablet.APIKey, "", []string{fmt.Sprintf("After the move, line %d.", i)})
	}
	after := nodesOf(t, by)[tablet.APIKeyHash]
	if after[other[x]] != 6 {
		t.Errorf("after %s stopped, the key's entries by node: %v; want 6 more on %s", x, after, other[x])
	}
	// The dialog moves with it and is warm again from its second turn there.
	cy3 := cachedTokens(t, by)
	l.infer(tablet.APIKey, "dialog-1", dialog)
	cy4 := cachedTokens(t, by)
	l.infer(tablet.APIKey, "dialog-1", append(dialog, "Yes please, with milk."))
	cy5 := cachedTokens(t, by)
	if cy5-cy4 <= cy4-cy3 {
		t.Errorf("cached prompt tokens on %s after the move: %v -> %v -> %v; want the dialog's next turn there to reuse its first", other[x], cy3, cy4, cy5)
	}
	// Requests without X-API-KEY (admin) are served too.
	if resp, err := l.do(http.MethodGet, "/v1/admin/keys", c.a.AdminHeader(), "", nil); err != nil || resp.Status != 200 {
		t.Errorf("admin through HAProxy after the move: %d %v", resp.Status, err)
	}
}

// TestHAProxyPerAddressLimitsSeeTheTablet: two tablets (127.0.0.2 and
// 127.0.0.3) reach two boxes through HAProxy. With HAProxy's address in
// REPLYD_TRUSTED_PROXIES the per-address limits count each tablet on its
// own: one tablet's failed authentications (in a box's memory) and its
// login-code request (the store's per-address interval, shared by the
// boxes) do not hold the other back. Without it both tablets are HAProxy's
// address and share those limits. Either way, an X-Forwarded-For that a
// client sends straight to a box is ignored: it cannot pose as many
// addresses.
func TestHAProxyPerAddressLimitsSeeTheTablet(t *testing.T) {
	for _, trusted := range []bool{true, false} {
		name := map[bool]string{true: "HAProxy trusted: each tablet on its own", false: "HAProxy not trusted: the tablets share its address"}[trusted]
		t.Run(name, func(t *testing.T) {
			env := map[string]string{}
			if trusted {
				env["REPLYD_TRUSTED_PROXIES"] = "127.0.0.1"
			}
			c := startCluster(t, env)
			l := startHAProxy(t, c)
			x, y := l.clientFrom("127.0.0.2"), l.clientFrom("127.0.0.3")
			// One made-up key: HAProxy hashes it to one box every time, so
			// both tablets' failures are counted by the same box.
			bad := map[string]string{"X-API-KEY": "rpd_made-up-" + replydproc.RandHex(8)}
			infer := func(client *http.Client, header map[string]string) replydproc.Response {
				t.Helper()
				ct, body := replydproc.InferForm([]byte(`{"messages":[]}`), nil)
				resp, err := l.doFrom(client, http.MethodPost, "/v1/infer", header, ct, body)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			for i := range 10 {
				wantError(t, fmt.Sprintf("tablet 127.0.0.2, bad key %d", i+1), infer(x, bad), 401, "unauthorized")
			}
			wantError(t, "tablet 127.0.0.2, bad key 11", infer(x, bad), 429, "rate_limited")
			if trusted {
				wantError(t, "tablet 127.0.0.3, its first bad key", infer(y, bad), 401, "unauthorized")
			} else {
				wantError(t, "tablet 127.0.0.3, its first bad key (HAProxy's address used up)", infer(y, bad), 429, "rate_limited")
			}

			send := func(client *http.Client) replydproc.Response {
				t.Helper()
				resp, err := l.doFrom(client, http.MethodPost, "/v1/admin/otp/send", nil, "", nil)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			if resp := send(x); resp.Status != 200 {
				t.Fatalf("login code for 127.0.0.2: %d %s", resp.Status, resp.Body)
			}
			if resp := send(y); trusted && resp.Status != 200 {
				t.Errorf("login code for 127.0.0.3 after 127.0.0.2's: %d %s; want 200 (another address)", resp.Status, resp.Body)
			} else if !trusted {
				wantError(t, "login code for 127.0.0.3 right after 127.0.0.2's (one address to replyd)", resp, 429, "rate_limited")
			}

			// Straight to a box, a forged X-Forwarded-For changes nothing:
			// 127.0.0.4 is not a trusted proxy.
			for i := range 11 {
				resp := c.a.Call(replydproc.Request{Path: "/v1/admin/keys", From: "127.0.0.4",
					Header: map[string]string{"X-ADMIN-SESSION": "forged", "X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i+1)}})
				want, code := 401, "unauthorized"
				if i == 10 {
					want, code = 429, "rate_limited"
				}
				wantError(t, fmt.Sprintf("direct request %d from 127.0.0.4 posing as 203.0.113.%d", i+1, i+1), resp, want, code)
			}
		})
	}
}
