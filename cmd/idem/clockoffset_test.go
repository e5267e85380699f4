package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --clock-offset, a test flag that skews a node's wall clock, took
// anything a duration holds: --clock-offset 2562047h started a node whose
// wall clock was 292 years ahead, with only a warning. It takes the skews
// its tests use (±10m, and chaos's fsm-loss nemesis's twice the
// retention), up to 24h or twice --retention; more is refused naming it.
func TestServeClockOffsetIsBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	validate := func(args ...string) error {
		t.Helper()
		_, err := validatedServe(t, dir, args...)
		return err
	}
	for _, args := range [][]string{
		{"--clock-offset", "10m"}, {"--clock-offset", "-10m"}, {"--clock-offset", "24h"}, {"--clock-offset", "-48h"},
		{"--clock-offset", "1h", "--retention", "10m"},
		{"--clock-offset", "100h", "--retention", "50h"}, // chaos.SkewFor(50h)
		// Twice a retention past half a duration's range does not wrap.
		{"--clock-offset", "2562047h", "--retention", "2000000h", "--bucket-width", "1000h"},
	} {
		require.NoError(t, validate(args...), "%v", args)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clock-offset", "2562047h"}, "--clock-offset 2562047h0m0s is more than 48h0m0s either way"},
		{[]string{"--clock-offset", "-2562047h"}, "--clock-offset -2562047h0m0s is more than 48h0m0s either way"},
		{[]string{"--clock-offset", "25h", "--retention", "10m"}, "--clock-offset 25h0m0s is more than 24h0m0s either way"},
	} {
		err := validate(tc.args...)
		require.Error(t, err, "%v", tc.args)
		require.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}

	// The refusal names the variable that set it, as serve's others do.
	t.Setenv("IDEM_CLOCK_OFFSET", "1000h")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.14:27731", "--raft-addr", "127.0.0.14:27732"}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	first := strings.Split(stderr.String(), "\n")[0]
	require.True(t, strings.HasPrefix(first, "idem serve: --clock-offset 1000h0m0s is more than 48h0m0s either way"), first)
	require.True(t, strings.HasSuffix(first, "(set by $IDEM_CLOCK_OFFSET)"), first)
}
