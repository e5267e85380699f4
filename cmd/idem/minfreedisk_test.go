package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// --min-free-disk 1TB on a smaller disk exited 1 with "free some space on
// that disk and start the node again", which no freeing could do. A value
// of the whole disk or more is refused as a bad flag, naming it, before
// the data dir is made.
func TestMinFreeDiskOverTheWholeDiskIsRefused(t *testing.T) {
	root := t.TempDir()
	_, total, err := engine.DiskSize(root)
	require.NoError(t, err)
	dir := filepath.Join(root, "new", "d")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"serve", "--data-dir", dir, "--http-addr", freePort(t), "--raft-addr", freePort(t),
		"--min-free-disk", strconv.FormatUint(total+1, 10)}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	require.True(t, strings.HasPrefix(stderr.String(), "idem serve: --min-free-disk "), stderr.String())
	require.Contains(t, stderr.String(), "is more than the whole disk holding "+dir)
	_, err = os.Stat(filepath.Join(root, "new"))
	require.True(t, os.IsNotExist(err), "the data dir was made")
}
