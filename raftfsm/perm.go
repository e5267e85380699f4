package raftfsm

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// Data files are 0600 in 0700 directories: the data dir holds every
// principal, key and fingerprint in plaintext (and every response, without
// an encryption key), and the raft log is as sensitive as the raft port.
// `idem serve` creates new files under umask 077; tightenDataDir fixes data
// dirs written before that (or by tools run under a looser umask) at start.

// tightenDataDir removes group and other permissions from every file and
// directory under dir, and from dir. It follows no symlink. A path it cannot
// change is logged, not fatal: the node's own files are what matter, and
// it owns them.
func tightenDataDir(dir string, log *slog.Logger) {
	changed := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			log.Warn("data dir permissions: cannot read", "path", path, "error", err)
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		mode := info.Mode().Perm()
		if mode&0o077 == 0 {
			return nil
		}
		if err := os.Chmod(path, mode&^0o077); err != nil {
			log.Warn("data dir permissions: cannot remove group and other access", "path", path, "mode", mode.String(), "error", err)
			return nil
		}
		changed++
		return nil
	})
	if changed > 0 {
		log.Info("data dir permissions tightened: group and other access removed", "data-dir", dir, "paths", changed)
	}
}
