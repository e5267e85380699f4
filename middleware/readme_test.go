package middleware_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's middleware snippet, and the example that mirrors it, set
// an http.Server's ReadHeaderTimeout and WriteTimeout but no ReadTimeout:
// the middleware reads a keyed request's whole body (up to 1 MiB) before
// it claims the key, and a caller copying the snippet let a client trickle
// that body, holding a connection and a goroutine, for as long as it
// liked. Every http.Server they make has a ReadTimeout.
func TestServerSnippetsSetAReadTimeout(t *testing.T) {
	server := regexp.MustCompile(`&http\.Server\{[^}]*\}`) // no braces inside: fields and durations
	for _, path := range []string{"../README.md", "../examples/payments/main.go"} {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		found := server.FindAll(b, -1)
		require.NotEmpty(t, found, "%s makes no http.Server", path)
		for _, s := range found {
			require.Contains(t, string(s), "ReadTimeout:", "%s: %s", path, s)
		}
	}
}
