package api

// The two embedded pages, the admin page at /admin/ and the conversation
// page at /app/, served from memory with an ETag per file.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// handleAppRedirect redirects /app to the conversation page, keeping the
// query (a pairing link carries its code in the fragment, which the browser
// keeps across the redirect).
func (s *Server) handleAppRedirect(c echo.Context) error {
	target := "/app/"
	if q := c.Request().URL.RawQuery; q != "" {
		target += "?" + q
	}
	return c.Redirect(http.StatusFound, target)
}

// handleRoot redirects / and /admin to the admin page.
func (s *Server) handleRoot(c echo.Context) error {
	return c.Redirect(http.StatusFound, "/admin/")
}

// staticFiles is one embedded page held in memory with an ETag per file.
type staticFiles struct {
	files map[string]staticFile
}

type staticFile struct {
	data  []byte
	etag  string
	ctype string
}

// staticTypes are content types mime does not know everywhere.
var staticTypes = map[string]string{
	".webmanifest": "application/manifest+json",
	".js":          "text/javascript; charset=utf-8",
	".svg":         "image/svg+xml",
}

// newStaticFiles loads every file of fsys into memory.
func newStaticFiles(fsys fs.FS) (*staticFiles, error) {
	sf := &staticFiles{files: map[string]staticFile{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		ctype := staticTypes[path.Ext(p)]
		if ctype == "" {
			ctype = mime.TypeByExtension(path.Ext(p))
		}
		if ctype == "" {
			ctype = http.DetectContentType(data)
		}
		sf.files[p] = staticFile{data: data, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: ctype}
		return nil
	})
	return sf, err
}

// handleAdminPage serves the admin page's files under /admin/.
func (s *Server) handleAdminPage(c echo.Context) error { return serveStatic(c, s.static) }

// handleAppPage serves the conversation page's files under /app/.
func (s *Server) handleAppPage(c echo.Context) error { return serveStatic(c, s.appStatic) }

// serveStatic serves the file of sf named by the route's wildcard. Only
// names that are valid fs paths of files in sf are served ("..", absolute
// and encoded traversal are 404); a directory serves its index.html. Every
// file is revalidated (Cache-Control: no-cache) against its ETag.
func serveStatic(c echo.Context, sf *staticFiles) error {
	name := c.Param("*")
	if name == "" || strings.HasSuffix(name, "/") {
		name += "index.html"
	}
	if !fs.ValidPath(name) || strings.Contains(name, `\`) {
		return errorf(CodeNotFound, "no such file")
	}
	f, ok := sf.files[name]
	if !ok {
		if idx, ok2 := sf.files[path.Join(name, "index.html")]; ok2 {
			f, ok = idx, true
		}
	}
	if !ok {
		return errorf(CodeNotFound, "no such file")
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	h.Set(echo.HeaderContentType, f.ctype)
	if match := c.Request().Header.Get("If-None-Match"); match != "" && strings.Contains(match, f.etag) {
		return c.NoContent(http.StatusNotModified)
	}
	http.ServeContent(c.Response(), c.Request(), name, time.Time{}, bytes.NewReader(f.data))
	return nil
}
