// Package web embeds replyd's two pages: the admin page served at /admin/
// and the conversation page served at /app/. Both are plain HTML/CSS/JS
// with no build step and no network dependency.
package web

import (
	"embed"
	"io/fs"
)

//go:embed admin
var admin embed.FS

//go:embed app
var app embed.FS

// AdminFS returns the admin page's files, rooted so that "index.html" is the
// page.
func AdminFS() fs.FS { return sub(admin, "admin") }

// AppFS returns the conversation page's files, rooted so that "index.html"
// is the page.
func AppFS() fs.FS { return sub(app, "app") }

func sub(f embed.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the embedded tree always has dir
	}
	return s
}
