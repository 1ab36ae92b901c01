package api

// Who is at the other end: the client address of a request, believed from
// X-Forwarded-For only when the peer is a trusted proxy.

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"
)

// ParseTrustedProxies parses REPLYD_TRUSTED_PROXIES: addresses or CIDR
// ranges separated by commas or spaces ("10.0.0.5, 10.1.0.0/16, fd00::/8").
// An address alone is a range of one. An empty list trusts no proxy.
func ParseTrustedProxies(list string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or CIDR range", f)
			}
			p = p.Masked()
			if p.Addr().Is4In6() {
				return nil, fmt.Errorf("%q: write IPv4 ranges in IPv4 form", f)
			}
			out = append(out, &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())})
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is not an address or CIDR range", f)
		}
		a = a.Unmap()
		out = append(out, &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())})
	}
	return out, nil
}

// ipExtractor is Echo's IPExtractor for the given trusted proxies: with
// none, the peer's address and nothing else (X-Forwarded-For is ignored,
// whoever sends it); with some, the nearest address in X-Forwarded-For that
// is not a trusted proxy, believed only when the peer itself is one.
// Loopback, link-local and private peers get no trust by default: a tablet
// on the clinic LAN is on a private network.
func ipExtractor(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// ClientAddr returns the address of the client that sent the request: the
// peer's address, or the one a trusted proxy reports (REPLYD_TRUSTED_PROXIES,
// Options.TrustedProxies), in canonical form (IPv4-mapped IPv6 as IPv4). It
// is what per-client limits count and what logs name; it is "unknown" only
// when the peer address cannot be read (never on a TCP listener).
func ClientAddr(c echo.Context) string {
	return canonicalAddr(c.RealIP())
}

// canonicalAddr normalises an address string; anything unparseable becomes
// "unknown" so that it cannot smuggle text into logs or map keys.
func canonicalAddr(s string) string {
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return "unknown"
	}
	return a.Unmap().WithZone("").String()
}

// addrBucket is the unit a per-address throttle counts: an IPv4 address, or
// the /64 network of an IPv6 address (one host commonly holds a whole /64).
// Anything unparsable shares one bucket.
func addrBucket(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return "unknown"
	}
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}
