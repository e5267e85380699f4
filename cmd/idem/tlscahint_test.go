package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A documentation walk renewed a node's certificate as docs/SECURITY.md
// showed it, `idem tls cert --name n1 --ip ... --force` without --dir, from
// the directory above pki/: it was told "(make a CA with idem tls ca)", and
// `idem tls ca` run again there was told "pass --force to replace it". Each
// led to a new CA, whose certificates no node of the cluster accepts.
// Neither message advises that now, and the CA's files are kept.
func TestTLSMessagesDoNotSteerARenewalToANewCA(t *testing.T) {
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"tls", "ca", "--dir", pki}, &stdout, &stderr), stderr.String())
	caBefore, err := os.ReadFile(filepath.Join(pki, "idem-ca.pem"))
	require.NoError(t, err)

	stderr.Reset()
	require.Equal(t, 1, run(context.Background(), []string{"tls", "ca", "--dir", pki}, &stdout, &stderr))
	msg := stderr.String()
	require.Contains(t, msg, "nothing was written")
	require.Contains(t, msg, "idem tls cert --dir "+pki)
	require.Contains(t, msg, "Rotate the CA")
	caAfter, err := os.ReadFile(filepath.Join(pki, "idem-ca.pem"))
	require.NoError(t, err)
	require.Equal(t, caBefore, caAfter)

	t.Chdir(dir) // where pki/ is, without --dir: no CA in "."
	stderr.Reset()
	require.Equal(t, 1, run(context.Background(), []string{"tls", "cert", "--name", "n1", "--ip", "10.0.0.1", "--force"}, &stdout, &stderr))
	msg = stderr.String()
	require.Contains(t, msg, "give --dir")
	require.NotContains(t, msg, "make a CA with idem tls ca")
}
