package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// --tls-client-auth require without the TLS flags was taken and changed
// nothing: the API served plain HTTP to callers with no certificate while
// the node's configuration said every caller must present one. It is
// refused, naming the flag (and its variable), before the data dir is made.
func TestTLSClientAuthRequireWithoutTLSIsRefused(t *testing.T) {
	for _, viaEnv := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "d")
		args := []string{"serve", "--data-dir", dir, "--http-addr", freePort(t), "--raft-addr", freePort(t)}
		if viaEnv {
			t.Setenv("IDEM_TLS_CLIENT_AUTH", "require")
		} else {
			args = append(args, "--tls-client-auth", "require")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		cancel()
		require.Equal(t, 2, code, stderr.String())
		require.True(t, strings.HasPrefix(stderr.String(), "idem serve: --tls-client-auth require without --tls-cert-file"), stderr.String())
		if viaEnv {
			require.Contains(t, stderr.String(), "(set by $IDEM_TLS_CLIENT_AUTH)")
		}
		_, err := os.Stat(dir)
		require.True(t, os.IsNotExist(err), "the data dir was made")
	}
}
