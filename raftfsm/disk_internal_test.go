package raftfsm

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

// A node that cannot install, at start, the snapshot it received because
// the disk is full says how out: a restart alone meets the same full disk
// (the received snapshot keeps its space), and the bare ENOSPC left the
// operator to guess. Other failures keep their plain error.
func TestStartRestoreOnAFullDiskNamesTheWaysOut(t *testing.T) {
	full := fmt.Errorf("engine: restore: %w", &fs.PathError{Op: "write", Path: "/d/fsm.restore/000001.sst", Err: syscall.ENOSPC})
	cfg := Config{NodeID: "n2", DataDir: "/d"}
	err := startRestoreError("2-71166-1", 720<<20, cfg, full)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the cause is kept for errors.Is: %v", err)
	}
	for _, want := range []string{"snapshot 2-71166-1", "no room", "/d", "754974720 bytes", "more room", "--join",
		// Removed before it rejoins empty, as every other rejoin advice
		// and docs/MEMBERSHIP.md say.
		"idem cluster remove --id n2", "move /d aside"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in: %v", want, err)
		}
	}
	other := startRestoreError("2-71166-1", 1, cfg, errors.New("engine: restore: corrupt"))
	if strings.Contains(other.Error(), "--join") || !strings.Contains(other.Error(), "restore snapshot 2-71166-1: engine: restore: corrupt") {
		t.Errorf("another failure: %v", other)
	}
}
