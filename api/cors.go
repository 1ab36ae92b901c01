package api

// Cross-origin access for browser clients served from other origins (a web
// communicator such as Cboard, or a clinic's own page). Only the routes a
// tablet calls get it; admin routes never do. Echo's CORS middleware is not
// used: it has no Private Network Access support and answers a refused
// preflight like an allowed one.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// corsMaxAge is how long a browser may cache a preflight answer.
const corsMaxAge = 10 * time.Minute

// corsAllowHeaders are the request headers a cross-origin client may send.
var corsAllowHeaders = []string{HeaderAPIKey, echo.HeaderContentType, echo.HeaderXRequestID}

// corsExposeHeaders are the response headers a cross-origin client may read.
var corsExposeHeaders = []string{"Retry-After", echo.HeaderXRequestID}

// ParseCORSOrigins parses REPLYD_CORS_ORIGINS: comma-separated exact origins
// (scheme://host[:port], http or https, no path, query or credentials). An
// empty string means none. "*" is refused: API keys are credentials, and a
// wildcard would let any web page a tablet opens use them.
func ParseCORSOrigins(s string) ([]string, error) {
	var out []string
	var errs []error
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if f == "*" || strings.Contains(f, "*") {
			errs = append(errs, errors.New(`"*" is not allowed: list each origin exactly (e.g. https://cboard.example.org), because API keys are credentials`))
			continue
		}
		u, err := url.Parse(f)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			errs = append(errs, fmt.Errorf("%q is not an origin: use scheme://host[:port], e.g. https://aac.example.org or http://192.168.1.20:8000", f))
			continue
		}
		o := strings.ToLower(u.Scheme + "://" + u.Host)
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, errors.Join(errs...)
}

// cors answers cross-origin requests on the routes tablets call. A request
// without Origin, or from the server's own origin, passes untouched. From a
// listed origin, a preflight (OPTIONS with Access-Control-Request-Method) is
// answered 204 with the allowed methods and headers, the cache time, and
// Access-Control-Allow-Private-Network when Chromium's Private Network Access
// check asks for it; a real request gets Access-Control-Allow-Origin and the
// exposed headers. From any other origin both are refused with 403 and no
// CORS headers, so the browser keeps the answer from the page.
func (s *Server) cors(methods ...string) echo.MiddlewareFunc {
	allowMethods := strings.Join(methods, ", ")
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			origin := r.Header.Get(echo.HeaderOrigin)
			h := c.Response().Header()
			h.Add(echo.HeaderVary, echo.HeaderOrigin)
			preflight := r.Method == http.MethodOptions && r.Header.Get(echo.HeaderAccessControlRequestMethod) != ""
			if origin == "" || (!preflight && sameOrigin(origin, r)) {
				return next(c)
			}
			if !slices.Contains(s.corsOrigins, strings.ToLower(origin)) {
				return errorf(CodeForbidden, "cross-origin requests from %s are not allowed: the administrator lists allowed origins in REPLYD_CORS_ORIGINS", originForMessage(origin))
			}
			h.Set(echo.HeaderAccessControlAllowOrigin, origin)
			if !preflight {
				h.Set(echo.HeaderAccessControlExposeHeaders, strings.Join(corsExposeHeaders, ", "))
				return next(c)
			}
			h.Add(echo.HeaderVary, echo.HeaderAccessControlRequestMethod)
			h.Add(echo.HeaderVary, echo.HeaderAccessControlRequestHeaders)
			h.Set(echo.HeaderAccessControlAllowMethods, allowMethods)
			h.Set(echo.HeaderAccessControlAllowHeaders, strings.Join(corsAllowHeaders, ", "))
			h.Set(echo.HeaderAccessControlMaxAge, strconv.Itoa(int(corsMaxAge/time.Second)))
			if strings.EqualFold(r.Header.Get("Access-Control-Request-Private-Network"), "true") {
				h.Set("Access-Control-Allow-Private-Network", "true")
			}
			return c.NoContent(http.StatusNoContent)
		}
	}
}

// sameOrigin reports whether origin names the host the request was sent to
// (the page under /app/ calling its own server).
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// originForMessage bounds an Origin header before it is quoted in a message.
func originForMessage(o string) string {
	if len(o) > 100 {
		o = o[:100] + "…"
	}
	return strconv.Quote(o)
}

// corsRoute registers a POST route that browser clients on the listed
// origins may call, with its preflight.
func (s *Server) corsRoute(e *echo.Echo, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	mw := s.cors(http.MethodPost)
	e.POST(path, h, append([]echo.MiddlewareFunc{mw}, m...)...)
	e.OPTIONS(path, func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, mw)
}
