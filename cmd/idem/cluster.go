package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/idem-store/idem/client"
)

func init() {
	extraCommands["cluster"] = command{Run: runCluster, Summary: "cluster membership: status, join, remove, transfer-leadership"}
}

const clusterUsage = `Usage: idem cluster <status|join|remove|transfer-leadership> [flags]

  status                 members, leader, term, commit and applied index
  join                   add a voter: --id, --raft-addr, --node-http-addr
  remove                 remove a node: --id
  transfer-leadership    hand leadership to another voter (for rolling restarts)

Any node answers; followers forward to the leader.

Flags:
`

func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idem cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr("IDEM_ADDR", client.DefaultAddr), "HTTP address of any node (env IDEM_ADDR)")
	token := fs.String("auth-token", os.Getenv("IDEM_AUTH_TOKEN"), "bearer token for a server started with --auth-file (env IDEM_AUTH_TOKEN)")
	id := fs.String("id", "", "node id (join, remove)")
	raftAddr := fs.String("raft-addr", "", "raft address of the node to add (join)")
	httpAddr := fs.String("node-http-addr", "", "HTTP address of the node to add (join)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), clusterUsage)
		fs.PrintDefaults()
	}
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		fs.SetOutput(stdout)
		fs.Usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var opts []client.Option
	if *token != "" {
		opts = append(opts, client.WithToken(*token))
	}
	cl, err := client.New(*addr, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "idem cluster: --addr: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var raw json.RawMessage
	switch sub {
	case "status":
		raw, err = cl.Do(ctx, http.MethodGet, "/v1/cluster", nil, nil)
	case "join":
		if *id == "" || *raftAddr == "" || *httpAddr == "" {
			fmt.Fprintln(stderr, "idem cluster join: --id, --raft-addr and --node-http-addr are required")
			return 2
		}
		raw, err = cl.Join(ctx, client.JoinRequest{ID: *id, RaftAddr: *raftAddr, HTTPAddr: *httpAddr})
	case "remove":
		if *id == "" {
			fmt.Fprintln(stderr, "idem cluster remove: --id is required")
			return 2
		}
		raw, err = cl.Remove(ctx, *id)
	case "transfer-leadership":
		raw, err = cl.Do(ctx, http.MethodPost, "/v1/cluster/transfer-leadership", nil, nil)
	default:
		fmt.Fprintf(stderr, "idem cluster: unknown subcommand %q\n", sub)
		fs.SetOutput(stderr)
		fs.Usage()
		return 2
	}
	if err != nil {
		var p *client.Problem
		if errors.As(err, &p) {
			fmt.Fprintf(stderr, "idem cluster %s: %s (code %s, HTTP %d)\n", sub, p.Detail, p.Code, p.Status)
		} else {
			fmt.Fprintf(stderr, "idem cluster %s: %v\n", sub, err)
		}
		return 1
	}
	cliWriteJSON(stdout, raw)
	return 0
}
