package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// An old-format auth file is one plain token a line, each an admin token:
// a line "changeme" (or "hi") loaded as an admin token with no more said
// than that the format is old. The start names the short ones.
func TestShortLegacyAdminTokensAreNamed(t *testing.T) {
	creds, err := api.ParseAuthFile([]byte("# tokens\nchangeme\nidem_FnCH1kqqsPeRrBqC3_ZBMGYcJ9DA0t2bQ1bS\nhi\n"))
	require.NoError(t, err)
	var buf bytes.Buffer
	logAuth(slog.New(slog.NewTextHandler(&buf, nil)), "auth file loaded", "/etc/idem/auth", creds)
	require.Contains(t, buf.String(), "admin tokens shorter than 16 characters")
	// Named as every log names them (line-N, the Nth token) and by the
	// line of the file each is on, the one to replace: "line-1" alone sent
	// the operator to the comment on line 1, and "line-3" to the strong
	// token on line 3, with the short one on line 4.
	require.Contains(t, buf.String(), `tokens="line-1 (file line 2),line-3 (file line 4)"`)

	buf.Reset()
	creds, err = api.ParseAuthFile([]byte("idem_FnCH1kqqsPeRrBqC3_ZBMGYcJ9DA0t2bQ1bS\n"))
	require.NoError(t, err)
	logAuth(slog.New(slog.NewTextHandler(&buf, nil)), "auth file loaded", "/etc/idem/auth", creds)
	require.NotContains(t, buf.String(), "shorter than")
}

// idem token check, the tool to look an auth file over before a rollout,
// names them too.
func TestTokenCheckNamesShortLegacyTokens(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "auth")
	require.NoError(t, os.WriteFile(auth, []byte("# ops\n\nidem_FnCH1kqqsPeRrBqC3_ZBMGYcJ9DA0t2bQ1bS\nchangeme\n"), 0o600))
	code, out, errOut := runClientCmd(t, runToken, "check", auth)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "note: admin tokens shorter than 16 characters, which a caller can guess by trying: line-2 (file line 4);")
}
