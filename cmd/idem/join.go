package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idem-store/idem/raftfsm"
)

// joinCluster asks the members named by --join to add this node, retrying
// until one answers. A node that is already a member (it has state) skips it.
func joinCluster(ctx context.Context, node *raftfsm.Node, c *serveConfig, tokens []string, log *slog.Logger) {
	if isMember(node) {
		log.Info("already a cluster member; --join ignored")
		return
	}
	body, _ := json.Marshal(map[string]string{"id": c.nodeID, "raft_addr": c.raftAdvertise, "http_addr": c.httpAdvertise})
	client := &http.Client{Timeout: 10 * time.Second}
	addrs := strings.Split(c.join, ",")
	for attempt := 0; ; attempt++ {
		for _, a := range addrs {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if !strings.Contains(a, "://") {
				a = "http://" + a
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, a+"/v1/cluster/join", bytes.NewReader(body))
			if err != nil {
				log.Error("join: bad --join address", "addr", a, "error", err)
				continue
			}
			req.Header.Set("Content-Type", "application/json")
			if len(tokens) > 0 {
				req.Header.Set("Authorization", "Bearer "+tokens[0])
			}
			resp, err := client.Do(req)
			if err != nil {
				log.Debug("join: member unreachable", "addr", a, "error", err)
				continue
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				log.Info("joined the cluster", "via", a)
				return
			}
			log.Warn("join refused", "addr", a, "status", resp.StatusCode, "answer", strings.TrimSpace(string(msg)))
		}
		if isMember(node) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func isMember(node *raftfsm.Node) bool {
	st, err := node.Status()
	if err != nil {
		return false
	}
	for _, m := range st.Nodes {
		if m.ID == node.Self().ID {
			return true
		}
	}
	return false
}
