// Command idem is the idempotency-key store: `idem serve` runs a node, the
// other subcommands speak its HTTP API.
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/idem-store/idem/raftfsm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	raftfsm.CommandName = commandFor(os.Args[0])
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// commandFor is how a command printed for the user to paste names this
// binary, given how it was run (os.Args[0]): "idem" when the shell found it
// on PATH, the path typed (./bin/idem, as the README runs it) otherwise,
// and "go run ./cmd/idem" for a binary go run built, which is gone once it
// exits. A path the shell would split is quoted.
func commandFor(arg0 string) string {
	if !strings.ContainsRune(arg0, filepath.Separator) {
		return "idem"
	}
	if strings.Contains(arg0, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/idem"
	}
	if strings.ContainsAny(arg0, " \t'\"$`\\;&|<>()*?[]#~") {
		return "'" + strings.ReplaceAll(arg0, "'", `'\''`) + "'"
	}
	return arg0
}
