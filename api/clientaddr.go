package api

import (
	"net"
	"net/netip"

	"github.com/labstack/echo/v4"
)

// clientAddr returns the address of the peer that sent the request (the TCP
// peer: forwarding headers are not trusted here), or "" when RemoteAddr
// cannot be parsed.
func clientAddr(c echo.Context) string {
	host, _, err := net.SplitHostPort(c.Request().RemoteAddr)
	if err != nil {
		host = c.Request().RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return ""
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
