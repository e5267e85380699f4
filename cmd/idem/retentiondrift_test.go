package main

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A node whose --retention differs from the cluster's says which flag to
// start it with. After idem cluster set-retention --retention 30s
// --allow-short-retention (a demo, a test), it advised "Start this node with
// --retention 30s", which idem serve refuses without --allow-short-retention:
// an operator who followed the warning had a node that did not start. Found
// by a walk of retention changes on a running cluster.
func TestRetentionDriftAdviceStarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	for _, cluster := range []time.Duration{30 * time.Second, 90 * time.Second, 48 * time.Hour} {
		var buf bytes.Buffer
		warnRetentionDrift(slog.New(slog.NewTextHandler(&buf, nil)), 24*time.Hour, cluster)
		m := regexp.MustCompile(`Start this node with (--retention [^,]*),`).FindStringSubmatch(buf.String())
		require.NotNil(t, m, "%s", buf.String())
		c, err := validatedServe(t, dir, strings.Fields(m[1])...)
		require.NoError(t, err, "the advice %q", m[1])
		require.Equal(t, cluster, c.retention)
	}
}
