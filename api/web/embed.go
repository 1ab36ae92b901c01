// Package web embeds the admin page served at /admin/. It is plain
// HTML/CSS/JS with no build step and no network dependency.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// FS returns the admin page's files, rooted so that "index.html" is the page.
func FS() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}
