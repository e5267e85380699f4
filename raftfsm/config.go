package raftfsm

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Node.
type Config struct {
	NodeID        string
	DataDir       string
	RaftAddr      string // bind address of the raft transport
	RaftAdvertise string // address other nodes dial; defaults to RaftAddr
	HTTPAdvertise string // HTTP address other nodes forward to
	// Version is the release this node runs, as /v1/cluster shows it (the
	// members' as the leader's health checks read them): an operator in a
	// rolling upgrade sees which nodes are done.
	Version string

	// Bootstrap a one-node cluster when there is no state (no --join).
	Bootstrap bool

	BucketWidth time.Duration // fixed at the first command of a cluster

	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	ApplyTimeout      time.Duration
	// SweepInterval is how often the leader looks for expired buckets.
	SweepInterval time.Duration
	// TickInterval is how often an idle leader stamps cluster time into the log.
	TickInterval time.Duration
	// ClockOffset skews this node's wall clock, for tests of clock skew. Only
	// the very first command of a new cluster reads a wall clock.
	ClockOffset time.Duration
	// Scope is this node's --scope ("endpoint" or "principal"; "" when
	// the caller does not say). Until the first write pins the cluster's
	// mode, a leader compares it with a non-voter's before promoting it:
	// a voter that led the first write would pin its own mode for every
	// node.
	Scope string
	// Retention is this node's --retention (0 when the caller does not
	// say). Until the first claim pins the cluster's retention, a leader
	// compares it with a non-voter's before promoting it, as it does
	// Scope: a voter that led the first claim would pin its own.
	Retention time.Duration
	// ChecksTokens is whether this node's API checks bearer tokens
	// (--auth-file). A leader that checks them does not promote a
	// non-voter that does not, and keeps it back (no stale reads): it
	// would answer every tenant's records to callers without a token.
	ChecksTokens bool
	CacheBytes   int64
	// MinFreeDisk is the free space under which the leader refuses client
	// writes with ErrStorageFull; a ballast of a quarter of it is kept in
	// the data dir (disk.go). 0 turns the guard off.
	MinFreeDisk uint64
	// InjectBug deliberately breaks this node, to prove the chaos checker
	// can fail: "local-reads" answers linearizable reads from the local
	// replica without proving leadership; "skip-uniqueness" makes this
	// node's Apply grant every claim. Never set it outside tests.
	InjectBug string
	// Keyring encrypts stored responses and correlation ids at rest
	// (crypt.go); nil stores them in plaintext.
	Keyring *Keyring

	// TLS, when set, makes the raft transport mutual TLS against its CA
	// (transport.go); nil is plain TCP.
	TLS *TLS

	// RaftListener, when set, is the transport's listener, already bound
	// to RaftAddr by the caller: idem serve opens its ports before it
	// writes anything to the data dir, so a port in use fails a start that
	// changed nothing. Once Open has built the transport on it, the
	// transport closes it (on Close, or when Open fails later); until then
	// it is the caller's to close. Closing it again is harmless.
	RaftListener net.Listener
	// MaxInboundRaftConns bounds the connections peers (or anyone who
	// reaches the raft port) hold open to this node at once; 0 is
	// DefaultMaxInboundRaftConns. idem serve lowers it under a small
	// open-files limit, where 256 silent connections alone took every
	// descriptor the process had.
	MaxInboundRaftConns int
	// BeforeRaft, when set, runs once this process holds the data dir (the
	// stores are open) and the raft transport is listening, before raft
	// reads or writes any state. idem serve records the settings a data dir
	// is created with there (node.json), so a start that fails earlier
	// leaves nothing that pins them. An error fails Open.
	BeforeRaft func() error
	// CheckStoredID is set when the caller has no record of the id this
	// data dir was created for (idem serve's node.json is missing): Open
	// then refuses, before it writes anything, a NodeID that no raft
	// configuration the data dir holds ever listed (*StoredIDError; see
	// checkStoredID for the starts it lets through). It reads the whole
	// raft log once, so it is for that case only.
	CheckStoredID bool

	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// Bugs that InjectBug can switch on.
const (
	BugLocalReads     = "local-reads"
	BugSkipUniqueness = "skip-uniqueness"
)

// DefaultConfig returns a Config with sane defaults for one local node.
func DefaultConfig() Config {
	return Config{
		NodeID:            "n1",
		DataDir:           "idem-data",
		RaftAddr:          "127.0.0.1:7071",
		HTTPAdvertise:     "127.0.0.1:7070",
		Bootstrap:         true,
		BucketWidth:       2 * time.Hour,
		SnapshotThreshold: 8192,
		SnapshotInterval:  10 * time.Second,
		TrailingLogs:      10240,
		ApplyTimeout:      5 * time.Second,
		SweepInterval:     time.Second,
		TickInterval:      time.Second,
		MinFreeDisk:       DefaultMinFreeDisk,
	}
}

// Validate reports every problem with the config at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	if c.NodeID == "" {
		bad("node id is empty")
	}
	if c.DataDir == "" {
		bad("data dir is empty")
	}
	if c.RaftAddr == "" {
		bad("raft address is empty")
	}
	if c.BucketWidth < time.Millisecond {
		bad("bucket width %s is below 1ms", c.BucketWidth)
	}
	switch c.InjectBug {
	case "", BugLocalReads, BugSkipUniqueness:
	default:
		bad("unknown bug %q to inject (%s or %s)", c.InjectBug, BugLocalReads, BugSkipUniqueness)
	}
	if c.ApplyTimeout <= 0 {
		bad("apply timeout must be positive")
	}
	if c.SweepInterval <= 0 || c.TickInterval <= 0 {
		bad("sweep and tick intervals must be positive")
	}
	if c.SnapshotThreshold == 0 || c.TrailingLogs == 0 {
		bad("snapshot threshold and trailing logs must be positive")
	}
	if c.SnapshotInterval < 5*time.Millisecond {
		bad("snapshot interval %s is too short", c.SnapshotInterval)
	}
	return errors.Join(errs...)
}
