package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// idem version --json, or idem version with a word pasted after it,
// printed the version and exited 0, as if what followed had been
// understood; every other command refuses what it does not take.
func TestVersionRefusesArguments(t *testing.T) {
	for _, args := range [][]string{{"version", "--json"}, {"version", "serve"}, {"--version", "x"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", args, stdout.String())
		require.Empty(t, stdout.String(), "%v", args)
		require.Contains(t, stderr.String(), "idem version: takes no flags or arguments", "%v", args)
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"version"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "idem ")
	stdout.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"version", "--help"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "Usage: idem version")
}
