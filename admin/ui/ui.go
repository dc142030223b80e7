// Package ui is baton's web dashboard: static HTML, CSS and JavaScript
// embedded in the binary, served by the admin API at / (admin.Config.UI).
// The page reads and acts only through the admin API, so the API's Host
// check, cross-origin protection, ACL admin rules and audit log apply to
// everything it does. See docs/dashboard.md.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the dashboard's files: index.html at /, the rest by
// name.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
