package raftfsm

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/internal/mono"
)

// StoreReadError is a read of this node's store that its disk failed
// (EIO: a bad sector under a table). The store stops such a read with a
// panic, never taking it for an absent record (a key answered absent
// could be claimed twice); a request's read answered nothing then
// (net/http recovered the panic and closed the connection).
type StoreReadError struct{ Err error }

// Error names the file (the node's log); Detail, a caller's answer, does not.
func (e *StoreReadError) Error() string {
	return fmt.Sprintf("raftfsm: this node could not read its store (%v): its disk failed the read, and nothing changed", e.Err)
}

func (e *StoreReadError) Unwrap() error { return e.Err }

// Detail says what failed and what to do; the answer's problem carries it.
// It names no file: a tenant is told nothing of the server's data dir
// (GET /readyz tells it only to an operator or admin token); the node's
// ERROR line names the file.
func (e *StoreReadError) Detail() string {
	return "this node could not read its store: its disk failed the read, and nothing changed. Retry, on another member if this one keeps failing; the node logged the file at ERROR"
}

// storeReadFailure reports whether p, a recovered panic, is a read of a
// store file that failed: the *os.PathError of a read, or EIO that is no
// failed write or fsync (those are the store's own stop, engine.IOStop).
func storeReadFailure(p any) (error, bool) {
	if _, ok := p.(runtime.Error); ok {
		return nil, false
	}
	e, ok := p.(error)
	if !ok {
		return nil, false
	}
	if _, _, failedWrite := engine.IOStop(e); failedWrite {
		return nil, false // the store's own stop (a failed write or fsync)
	}
	var pe *os.PathError
	if errors.As(e, &pe) && pe.Op == "read" || errors.Is(e, syscall.EIO) {
		return e, true
	}
	return nil, false
}

// DiskReadFailed reports whether err is a read of a store file the disk
// failed (storeReadFailure): what a caller streaming the store (a
// backup) tells apart from its client's connection.
func DiskReadFailed(err error) bool {
	_, ok := storeReadFailure(err)
	return ok
}

// readLogged is when a failed read was last logged (mono.Now()).
var readLogged atomic.Int64

// readStore runs f, a read of the store for a request, and returns a
// failed read of the disk as a *StoreReadError, logged at ERROR at most
// once every 10 s; any other panic goes on.
func readStore(log *slog.Logger, f func()) (err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		e, ok := storeReadFailure(p)
		if !ok {
			panic(p)
		}
		err = readFailed(log, e)
	}()
	f()
	return nil
}

// readFailed is e, a read of the store the disk failed, as the
// *StoreReadError a request is answered with, logged at ERROR at most once
// every 10 s.
func readFailed(log *slog.Logger, e error) error {
	if t := readLogged.Load(); (t == 0 || mono.Since(t) >= 10*time.Second) && readLogged.CompareAndSwap(t, mono.Now()) && log != nil {
		log.Error(fmt.Sprintf("this node's disk failed a read of its store (%v): the request was answered 503, and nothing changed (logged at most once every 10s). "+
			"Check the disk and the filesystem (dmesg, SMART); on a disk that keeps failing, move the data dir to a sound one, or rebuild the node from a member (--join with an empty data dir) or, alone, from a backup (docs/DISK.md)", e))
	}
	return &StoreReadError{Err: e}
}

// stateHashes is db's state hashes (Node.StateHashes) with a read the disk
// failed returned as a *StoreReadError: the store's iterator returns it as
// an error, not the panic readStore turns into one, and the admin route
// answered it 500 "internal error".
func stateHashes(db *engine.DB, log *slog.Logger) (hash, withGated string, applied uint64, err error) {
	hash, withGated, applied, err = db.StateHashes()
	if err != nil {
		if e, ok := storeReadFailure(err); ok {
			err = readFailed(log, e)
		}
	}
	return hash, withGated, applied, err
}

// stopOnFailedRead, deferred around an apply, stops the process when the
// store failed a read the apply needed: every node applies every entry,
// and this one cannot. It stopped with Go's panic and a goroutine dump,
// exit status 2, and no advice.
func stopOnFailedRead(log *slog.Logger) {
	p := recover()
	if p == nil {
		return
	}
	e, ok := storeReadFailure(p)
	if !ok {
		panic(p)
	}
	if log == nil {
		log = slog.Default()
	}
	log.Error(fmt.Sprintf("this node's disk failed a read of its store as it applied the raft log (%v): this node stops, as it cannot apply the log. "+
		"Nothing it acknowledged is lost: the raft log holds what the store had not applied. Check the disk and the filesystem (dmesg, SMART); "+
		"on a disk that still fails, move the data dir to a sound one, or rebuild the node from a member (--join with an empty data dir) or, alone, from a backup (docs/DISK.md)", e))
	exit(1)
	panic(p) // exit returns only in tests
}
