package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An operator walk: n2 restarted from a command that lost its --node-id
// was refused as `--node-id "n1" differs from "n2"`, naming a value
// nowhere on the command line. Without the flag it says the default was
// used; given, it names the value given, as before.
func TestNodeIDRefusalSaysWhenTheIDIsTheDefault(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writeNodeFile(filepath.Join(dir, "node.json"), nodeFile{NodeID: "n2", BucketWidthMs: (2 * time.Hour).Milliseconds(), Scope: "endpoint"}))
	c := &serveConfig{nodeID: "n1", dataDir: dir, bucketWidth: 2 * time.Hour, scope: "endpoint"}

	_, err := fixedSettings(c, map[string]bool{})
	require.ErrorContains(t, err, `--node-id was not given, and its default, "n1", differs from "n2", the node `+dir+` was created for`)
	require.ErrorContains(t, err, "start it with --node-id n2")

	_, err = fixedSettings(c, map[string]bool{"node-id": true})
	require.ErrorContains(t, err, `--node-id "n1" differs from "n2", the node `+dir+` was created for`)
}
