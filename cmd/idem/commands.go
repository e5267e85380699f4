package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
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

// parseArgs parses the flags of command name. It returns done when the
// command must return code at once: 0 after --help (printed to stdout), 2
// after a usage error (named on stderr with a pointer to --help).
func parseArgs(fs *flag.FlagSet, args []string, name string, stdout, stderr io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, true
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", name, err, name)
		return 2, true
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %q (see %s --help)\n", name, fs.Arg(0), name)
		return 2, true
	}
	return 0, false
}

// parseSubcommand parses `name SUB [flags]`: with no arguments or a help
// word it prints the usage (exit 2 and 0); otherwise it parses the flags
// after SUB. done means the command returns code at once.
func parseSubcommand(fs *flag.FlagSet, name string, args []string, stdout, stderr io.Writer) (sub string, code int, done bool) {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		fs.SetOutput(stdout)
		fs.Usage()
		if len(args) == 0 {
			return "", 2, true
		}
		return "", 0, true
	}
	sub = args[0]
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return sub, 0, true
		}
		return sub, 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s %s: unexpected argument %q (flags go as --name value)\n", name, sub, fs.Arg(0))
		return sub, 2, true
	}
	return sub, 0, false
}

// authTokenFlag registers --auth-token and returns its value, or when it
// is not given, IDEM_AUTH_TOKEN's. The variable is not the flag's default:
// --help prints defaults, and a token would land in terminals and CI logs.
func authTokenFlag(fs *flag.FlagSet, usage string) func() string {
	v := fs.String("auth-token", "", usage)
	return func() string {
		if *v != "" {
			return *v
		}
		return os.Getenv("IDEM_AUTH_TOKEN")
	}
}

// printFlags prints every flag of fs with its usage string, as --name
// rather than flag.PrintDefaults's -name, since that is how the usage
// texts, the error messages and scripts write them. Every command's
// --help uses it, so all print their flags alike.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			// Quoted for strings only, as flag.PrintDefaults does.
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isString := g.Get().(string); !isString {
					text += fmt.Sprintf(" (default %s)", f.DefValue)
					break
				}
			}
			text += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(text, "\n", "\n    \t"))
	})
}
