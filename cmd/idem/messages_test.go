package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDurationWithoutUnitNamesTheFix: `idem serve --retention 48` printed
// the flag package's `invalid value "48" for flag -retention: parse
// error` and `idem cluster set-retention --retention 48` the whole usage
// after it. Every command's flags, and serve's IDEM_* variables, are
// parsed in one place that says what is wrong on one line.
func TestDurationWithoutUnitNamesTheFix(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string // IDEM_RETENTION
		want string // the first line of stderr
	}{
		{args: []string{"serve", "--retention", "48"}, want: "idem serve: --retention 48: a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"serve", "--bucket-width=2"}, want: "idem serve: --bucket-width 2: a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"serve", "--lease", "1.5"}, want: "idem serve: --lease 1.5: a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"serve"}, env: "48", want: "idem serve: $IDEM_RETENTION=48 (--retention): a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"serve", "--retention", "abc"}, want: `idem serve: --retention: invalid duration "abc"`},
		{args: []string{"serve", "--max-keys-per-principal", "many"}, want: `idem serve: --max-keys-per-principal: invalid integer "many"`},
		{args: []string{"cluster", "set-retention", "--retention", "48"}, want: "idem cluster set-retention: --retention 48: a duration needs a unit, e.g. 48h, 30m or 90s (see idem cluster --help)"},
		{args: []string{"cluster", "status", "--force=maybe"}, want: `idem cluster status: --force: invalid boolean "maybe" (see idem cluster --help)`},
		{args: []string{"keys", "status", "--timeout", "5"}, want: "idem keys status: --timeout 5: a duration needs a unit, e.g. 48h, 30m or 90s (see idem keys --help)"},
		{args: []string{"claim", "--lease", "30"}, want: "idem claim: --lease 30: a duration needs a unit, e.g. 48h, 30m or 90s"},
		{args: []string{"bench", "--duration", "10"}, want: "idem bench: --duration 10: a duration needs a unit, e.g. 48h, 30m or 90s (see idem bench --help)"},
		{args: []string{"snapshot", "save", "f", "--addr", "x:1", "--force=maybe"}, want: `idem snapshot save: --force: invalid boolean "maybe" (see idem snapshot --help)`},
	} {
		t.Setenv("IDEM_RETENTION", tc.env) // restored after the test
		if tc.env == "" {
			os.Unsetenv("IDEM_RETENTION")
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		require.Equal(t, tc.want, lines[0], "%v", tc.args)
		// At most a pointer to --help after it, never the usage.
		require.LessOrEqual(t, len(lines), 2, "%v:\n%s", tc.args, stderr.String())
		require.NotContains(t, stderr.String(), "Usage", "%v", tc.args)
		require.NotContains(t, stderr.String(), "parse error", "%v", tc.args)
		require.Empty(t, stdout.String(), "%v", tc.args)
	}
}
