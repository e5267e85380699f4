package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "idem %s (%s)\n", version, goVersion())
		return 0
	case "help", "-h", "--help", "-help":
		if len(rest) > 0 {
			return run(ctx, []string{rest[0], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return 0
	}
	if c, ok := clientCommands[cmd]; ok {
		return c.Run(ctx, rest, stdout, stderr)
	}
	if c, ok := extraCommands[cmd]; ok {
		return c.Run(ctx, rest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "idem: unknown command %q\n\n", cmd)
	usage(stderr)
	return 2
}

type command struct {
	Run     func(context.Context, []string, io.Writer, io.Writer) int
	Summary string
}

// extraCommands are registered by other files (bench, cluster tools).
var extraCommands = map[string]command{}

func usage(w io.Writer) {
	fmt.Fprint(w, `idem — a replicated idempotency-key store

Usage: idem <command> [flags]

Server:
  serve       run a node (one-node cluster by default; see idem serve --help)
  version     print the version

Client (speak the HTTP API of a running node; each takes --help):
`)
	names := make([]string, 0, len(clientCommands))
	for n := range clientCommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, clientCommands[n].Summary)
	}
	if len(extraCommands) > 0 {
		fmt.Fprint(w, "\nTools:\n")
		names = names[:0]
		for n := range extraCommands {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %-11s %s\n", n, extraCommands[n].Summary)
		}
	}
	fmt.Fprint(w, "\nRun 'idem <command> --help' for the flags of a command.\n")
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}
