package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The node logs what clients send (principals, paths, token names, bodies'
// members in errors). A bidi control in it (U+202E reverses what follows)
// was written raw by --log-format json, so a log viewer showed the line
// reordered as the caller chose; the text format quotes it. Both now write
// such runes escaped, and JSON lines stay JSON.
func TestLogsEscapeInvisibleRunes(t *testing.T) {
	const hostile = "cus_1\u202eevil\u200b\u2066x" // RLO, zero-width space, LRI
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		log := newLogger(&serveConfig{logLevel: "info", logFormat: format}, &buf)
		log.Warn("refused "+hostile, "principal", hostile, "error", errors.New("bad "+hostile), "plain", "héllo 世界",
			"principals", []string{"ok", hostile}, "op", struct{ Key string }{hostile}, slog.Group("g", "p", hostile))
		out := buf.String()
		for _, r := range []string{"\u202e", "\u200b", "\u2066"} {
			require.NotContains(t, out, r, "%s: %s", format, out)
		}
		require.Contains(t, out, `202e`, format)
		require.Contains(t, out, "héllo 世界", "%s: printable text is left as it is", format)
		if format == "json" {
			var line map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line), out)
			require.Equal(t, `cus_1\u202eevil\u200b\u2066x`, line["principal"])
			require.Equal(t, `bad cus_1\u202eevil\u200b\u2066x`, line["error"])
			require.Equal(t, `refused cus_1\u202eevil\u200b\u2066x`, line["msg"])
			require.Equal(t, []any{"ok", `cus_1\u202eevil\u200b\u2066x`}, line["principals"], "a slice's strings")
			require.Equal(t, map[string]any{"Key": `cus_1\u202eevil\u200b\u2066x`}, line["op"], "a struct's")
			require.Equal(t, map[string]any{"p": `cus_1\u202eevil\u200b\u2066x`}, line["g"], "a group's")
		}
	}
}

// U+2028 and U+2029, line and paragraph separators, print nothing and a
// log viewer may break a line at them. In a string attribute they are
// written as the text \u2028, as the other invisible runes are; inside a
// slice or a struct encoding/json writes them as its own escape \u2028,
// which a reader of the JSON decodes back to the separator itself, so
// they passed through as if nothing had been escaped.
func TestJSONLogEscapesLineSeparatorsInValues(t *testing.T) {
	const hostile = "cus_1\u2028level=ERROR msg=forged\u2029x"
	var buf bytes.Buffer
	log := newLogger(&serveConfig{logLevel: "info", logFormat: "json"}, &buf)
	log.Warn("refused", "principal", hostile, "principals", []string{`a\u2028`, hostile}, "op", struct{ Key string }{hostile})
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
	const want = `cus_1\u2028level=ERROR msg=forged\u2029x`
	require.Equal(t, want, line["principal"])
	require.Equal(t, []any{`a\u2028`, want}, line["principals"], "a slice's strings (the text \\u2028 kept as it is)")
	require.Equal(t, map[string]any{"Key": want}, line["op"], "a struct's")
}
