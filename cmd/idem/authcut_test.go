package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/api"
)

// An old-format auth file (plain tokens, each an admin token) read on
// SIGHUP while it was being saved in place: the cut start of a token, as
// short as one byte, became an admin token, and the whole token stopped
// working (a kill -9 walk of every byte length). A reload whose last line
// has no line end and is not a token in force is refused, the tokens in
// force kept; the whole file, or a line end after a new last token, loads.
func TestAuthReloadRefusesAnOldFormatFileCutShort(t *testing.T) {
	const first, second = "first-admin-token-0123456789", "second-admin-token-0123456789"
	path := filepath.Join(t.TempDir(), "auth")
	write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	works := func(auth *api.Auth, tok string) bool {
		_, ok := auth.Credentials().Authenticate(tok)
		return ok
	}

	full := first + "\n" + second + "\n"
	write(full)
	creds, err := api.LoadAuthFile(path)
	require.NoError(t, err)
	for n := range len(full) {
		auth := api.NewAuth(creds)
		write(full[:n]) // the file as a SIGHUP may read it mid-save
		reloadAuth(path, auth, "", log)
		for _, tok := range []string{first, second} {
			for k := 1; k < len(tok); k++ {
				require.False(t, works(auth, tok[:k]), "cut at byte %d: %q, the start of a token, became an admin token", n, tok[:k])
			}
		}
		require.True(t, works(auth, first), "cut at byte %d: the first token stopped working", n)
		if n < len(first)+1+len(second) && n > len(first)+1 {
			require.True(t, works(auth, second), "cut at byte %d inside the second token: it stopped working", n)
			require.NotEmpty(t, auth.ReloadError(), "cut at byte %d: the refusal is published", n)
		}
	}
	require.Contains(t, logs.String(), "auth file not reloaded")
	require.Contains(t, logs.String(), "is a token not in force with no line end after it")

	// A token added on a last line without a line end is refused until it
	// has one; the tokens in force keep working meanwhile.
	const third = "third-admin-token-0123456789"
	auth := api.NewAuth(creds)
	write(full + third)
	reloadAuth(path, auth, "", log)
	require.False(t, works(auth, third))
	require.True(t, works(auth, second))
	write(full + third + "\n")
	reloadAuth(path, auth, "", log)
	require.True(t, works(auth, third))
	require.Empty(t, auth.ReloadError())

	// A last token already in force needs no line end: a file written
	// with printf reloads as it was.
	write(strings.TrimSuffix(full, "\n"))
	reloadAuth(path, auth, "", log)
	require.Empty(t, auth.ReloadError())
	require.True(t, works(auth, second))
	require.False(t, works(auth, third), "the reloaded file no longer lists it")
}
