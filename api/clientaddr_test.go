package api

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

func TestParseTrustedProxies(t *testing.T) {
	got, err := ParseTrustedProxies(" 10.0.0.5, 10.1.2.3/16  fd00::/8,::ffff:192.168.1.1\n2001:db8::1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.5/32", "10.1.0.0/16", "fd00::/8", "192.168.1.1/32", "2001:db8::1/128"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	if got, err := ParseTrustedProxies(""); err != nil || got != nil {
		t.Errorf("empty list: %v, %v", got, err)
	}
	for _, bad := range []string{"10.0.0", "example.com", "10.0.0.0/33", "fe80::1%eth0", "::ffff:10.0.0.0/104"} {
		if _, err := ParseTrustedProxies(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestClientAddr(t *testing.T) {
	proxies, err := ParseTrustedProxies("10.0.0.5, 10.9.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		trusted bool
		peer    string
		xff     []string
		want    string
	}{
		{"no proxies: the peer", false, "192.168.1.20:5555", nil, "192.168.1.20"},
		{"no proxies: X-Forwarded-For ignored", false, "192.168.1.20:5555", []string{"1.2.3.4"}, "192.168.1.20"},
		{"no proxies: loopback peer, X-Forwarded-For ignored", false, "127.0.0.1:5555", []string{"1.2.3.4"}, "127.0.0.1"},
		{"IPv4-mapped peer", false, "[::ffff:192.168.1.20]:5555", nil, "192.168.1.20"},
		{"IPv6 peer", false, "[fd00::20]:5555", nil, "fd00::20"},
		{"untrusted peer's X-Forwarded-For ignored", true, "192.168.1.20:5555", []string{"1.2.3.4"}, "192.168.1.20"},
		{"private peer is not trusted by default", true, "10.0.0.6:5555", []string{"1.2.3.4"}, "10.0.0.6"},
		{"trusted proxy: the address it reports", true, "10.0.0.5:5555", []string{"192.168.1.20"}, "192.168.1.20"},
		{"trusted proxy: a forged left part is ignored", true, "10.0.0.5:5555", []string{"6.6.6.6, 192.168.1.20"}, "192.168.1.20"},
		{"two trusted proxies in a row", true, "10.0.0.5:5555", []string{"192.168.1.20, 10.9.4.4"}, "192.168.1.20"},
		{"several header lines", true, "10.0.0.5:5555", []string{"6.6.6.6", "192.168.1.21"}, "192.168.1.21"},
		{"trusted proxy without the header", true, "10.0.0.5:5555", nil, "10.0.0.5"},
		{"garbage from the proxy: the proxy", true, "10.0.0.5:5555", []string{"not an address"}, "10.0.0.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := echo.New()
			if tc.trusted {
				e.IPExtractor = ipExtractor(proxies)
			} else {
				e.IPExtractor = ipExtractor(nil)
			}
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				req.Header.Add("X-Forwarded-For", v)
			}
			if got := ClientAddr(e.NewContext(req, httptest.NewRecorder())); got != tc.want {
				t.Errorf("ClientAddr = %q, want %q", got, tc.want)
			}
		})
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "@"
	if got := ClientAddr(echo.New().NewContext(req, httptest.NewRecorder())); got != "unknown" {
		t.Errorf("unreadable peer: %q", got)
	}
}
