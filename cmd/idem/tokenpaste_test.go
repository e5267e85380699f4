package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A token read by IDEM_AUTH_TOKEN=$(cat token.txt) from a file with
// Windows line endings keeps its carriage return (the shell strips only
// the newline), and so does one pasted with its line end into
// --auth-token. Every command then failed with `client: invalid value
// for header "Authorization"`, naming neither the flag nor the byte, while
// the same token in --token-file (and the node's --node-token-file) was
// read without it. The token is trimmed as --token-file's line is, and a
// control character inside it is refused, naming where it came from.
func TestTokenWithALineEndAroundItIsTheToken(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	f := newAPIFake(t, http.StatusNotFound, `{"type":"about:blank","title":"Not Found","status":404,"code":"not_found","detail":"no live record"}`)
	scope := []string{"--principal", "p", "--endpoint", "e", "--key", "k"}
	crlf := filepath.Join(t.TempDir(), "token.txt")
	require.NoError(t, os.WriteFile(crlf, []byte("idem_tok\r\n"), 0o600))

	for _, tc := range []struct {
		name string
		env  string
		args []string
	}{
		{"$IDEM_AUTH_TOKEN with a carriage return", "idem_tok\r", nil},
		{"--auth-token with a carriage return and newline", "", []string{"--auth-token", "idem_tok\r\n"}},
		{"--auth-token with spaces", "", []string{"--auth-token", " idem_tok "}},
		{"--token-file of Windows line endings", "", []string{"--token-file", crlf}},
	} {
		t.Setenv("IDEM_AUTH_TOKEN", tc.env)
		f.auth = ""
		code, _, stderr := runClientCmd(t, runGet, append(append([]string{"--addr", f.url}, tc.args...), scope...)...)
		require.Equal(t, 1, code, "%s: %s", tc.name, stderr)
		require.Contains(t, stderr, "no live record", "%s: the request reached the node", tc.name)
		require.Equal(t, "Bearer idem_tok", f.auth, tc.name)
	}

	t.Setenv("IDEM_AUTH_TOKEN", "idem_\x01tok")
	code, _, stderr := runClientCmd(t, runGet, append([]string{"--addr", f.url}, scope...)...)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "$IDEM_AUTH_TOKEN: the token holds a control character (byte 0x01 at offset 5)")
	require.False(t, strings.Contains(stderr, "idem_\x01tok"), "the token is not printed")
}
