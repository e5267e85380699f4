package raftfsm

import (
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node's Prometheus metrics. Counters of decisions are
// counted where the decision is returned to a caller (the leader); gauges of
// stored data are read from the engine at scrape time.
type Metrics struct {
	Claims        *prometheus.CounterVec
	Completes     *prometheus.CounterVec
	Releases      *prometheus.CounterVec
	Extends       *prometheus.CounterVec
	Takeovers     prometheus.Counter
	ClaimLatency  prometheus.Histogram
	BucketsDrop   prometheus.Counter
	RecordsDrop   prometheus.Counter
	DropsRefused  prometheus.Counter
	DropApply     prometheus.Histogram
	ApplyBatch    prometheus.Histogram
	LeaderChanges prometheus.Counter
	applyFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_claims_total", Help: "Claims decided, by outcome.",
		}, []string{"outcome"}),
		Completes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_completes_total", Help: "Complete requests decided, by outcome.",
		}, []string{"outcome"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_releases_total", Help: "Release requests decided, by outcome.",
		}, []string{"outcome"}),
		Extends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_extends_total", Help: "Extend requests decided, by outcome.",
		}, []string{"outcome"}),
		Takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_takeovers_total", Help: "Claims that took over an in-progress record whose lease ran out.",
		}),
		ClaimLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "idem_claim_duration_seconds", Help: "Time from proposing a claim to its decision.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		BucketsDrop: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_buckets_dropped_total", Help: "Expired time buckets removed by range deletion on this replica.",
		}),
		RecordsDrop: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_records_dropped_total", Help: "Expired records removed with their buckets on this replica.",
		}),
		DropsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_bucket_drops_refused_total", Help: "DropBucket commands refused because the bucket was not wholly expired.",
		}),
		DropApply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "idem_bucket_drop_apply_seconds", Help: "Time Apply spends on one DropBucket command (quota subtraction and the range deletion), before the batch commit.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		ApplyBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "idem_fsm_apply_batch_entries", Help: "Raft log entries per FSM batch (one Pebble commit each): how well raft batches under load.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		LeaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_raft_leader_changes_total", Help: "Times this node learned of a leader other than the last one it knew (the first leader after a start counts once).",
		}),
		applyFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_bad_commands_total", Help: "Log entries that did not decode (ignored identically on every replica).",
		}),
	}
	for _, o := range []string{"claimed", "replay", "in_progress", "fingerprint_mismatch", "quota_exceeded", "principal_limit"} {
		m.Claims.WithLabelValues(o)
	}
	// Every outcome an operator alerts on exists from the start, so a rate
	// over it is 0 rather than absent on a fresh node.
	tokenOutcomes := []string{"token_mismatch", "not_found", "already_completed"}
	for _, o := range append([]string{"completed"}, tokenOutcomes...) {
		m.Completes.WithLabelValues(o)
	}
	for _, o := range append([]string{"released"}, tokenOutcomes...) {
		m.Releases.WithLabelValues(o)
	}
	for _, o := range append([]string{"extended"}, tokenOutcomes...) {
		m.Extends.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.Claims, m.Completes, m.Releases, m.Extends, m.Takeovers, m.ClaimLatency,
			m.BucketsDrop, m.RecordsDrop, m.DropsRefused, m.DropApply, m.ApplyBatch, m.LeaderChanges, m.applyFailures)
	}
	return m
}

func (m *Metrics) batch(entries int) {
	if m != nil {
		m.ApplyBatch.Observe(float64(entries))
	}
}

func (m *Metrics) dropped(records int64, took time.Duration) {
	if m == nil {
		return
	}
	m.DropApply.Observe(took.Seconds())
	m.BucketsDrop.Inc()
	m.RecordsDrop.Add(float64(records))
}

// stateCollector reads the engine and raft once per scrape.
type stateCollector struct {
	n  *Node
	mu sync.Mutex

	records, bytes, oldest, inProgress, oldestInProgress, disk, buckets *prometheus.Desc
	state, term, commit, applied, fsmApplied, clusterTime, leader       *prometheus.Desc
	filterReady                                                         *prometheus.Desc
	applyLag, maxRetention, retention, width                            *prometheus.Desc
	leaseExpired                                                        *prometheus.Desc
	stalls, stallSeconds                                                *prometheus.Desc
}

// newStateCollector is called once per node, right after raft starts.
func newStateCollector(n *Node) *stateCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &stateCollector{
		n:                n,
		records:          d("idem_records", "Records stored (expired ones count until their bucket is dropped)."),
		bytes:            d("idem_record_bytes", "Bytes of stored records."),
		oldest:           d("idem_oldest_record_age_seconds", "Age of the oldest stored record by cluster time; grows without bound if expiry stalls."),
		inProgress:       d("idem_in_progress", "Records in progress (holding or having held a lease)."),
		oldestInProgress: d("idem_oldest_in_progress_age_seconds", "Age of the oldest in-progress record."),
		leaseExpired:     d("idem_in_progress_lease_expired", "In-progress records whose lease ran out: attempts neither completed nor released (the caller crashed or lost its answer) that no retry has taken over yet."),
		disk:             d("idem_disk_bytes", "Bytes Pebble uses on disk."),
		stalls:           d("idem_store_write_stalls_total", "Times Pebble stalled every write since the node started: its memtables waited for a flush (a slow or full disk) or level 0 for compactions."),
		stallSeconds:     d("idem_store_write_stall_seconds_total", "Time Pebble's write stalls lasted since the node started; every commit, and so every write, waited that long."),
		buckets:          d("idem_buckets", "Time buckets holding data."),
		state:            prometheus.NewDesc("idem_raft_state", "Raft state of this node (1 for the current state).", []string{"state"}, nil),
		term:             d("idem_raft_term", "Current raft term."),
		commit:           d("idem_raft_commit_index", "Raft commit index."),
		applied:          d("idem_raft_applied_index", "Raft applied index."),
		fsmApplied:       d("idem_fsm_applied_index", "Index stored with the data in Pebble."),
		clusterTime:      d("idem_cluster_time_seconds", "Cluster time as this node sees it (Unix seconds)."),
		filterReady:      d("idem_probe_filter_ready", "1 once the in-memory probe filters are built after a start or a snapshot restore; until then claims probe every bucket in Pebble."),
		leader:           d("idem_raft_has_leader", "1 when this node knows a leader."),
		applyLag:         d("idem_apply_lag_entries", "Log entries this node's raft has committed that its state does not reflect yet (0 when only no-op and barrier entries remain)."),
		maxRetention:     d("idem_max_retention_seconds", "Longest retention the cluster has given a record, or been set to, since it was created (replicated state; 0 before the first claim). It never goes down: lowered by set-retention, or once the records given it are gone, it stays (a claim probes every bucket such a record could sit in)."),
		retention:        d("idem_retention_seconds", "The cluster's retention of new records (replicated state, pinned by the first claim; 0 before it)."),
		width:            d("idem_bucket_width_seconds", "Width of the time buckets expiry drops whole (replicated state; 0 before the first command): a record stays stored at most this long past its expiry."),
	}
}

// watchLeaderChanges counts, in c, each time r learns of a leader other
// than the last one it knew, and logs it at info, as the loss of the last
// one: raft says so only at debug (its routine lines), and an operator
// reading a node's log after an outage found no word of who led when. It
// works in raft's observer filter, which raft calls synchronously for
// every observation, so no goroutine or channel is needed and nothing is
// missed between scrapes (a gauge sampled at scrape time would miss a
// change and its change back). A node closing loses its leader too, as
// raft shuts down: closing says so, and the line is not logged then (a
// Ctrl-C of a one-node store read "an election is under way").
func watchLeaderChanges(r *raft.Raft, c prometheus.Counter, log *slog.Logger, self raft.ServerID, closing func() bool) {
	var mu sync.Mutex
	var last raft.ServerID
	known := false
	r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		lo, ok := o.Data.(raft.LeaderObservation)
		if !ok {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case lo.LeaderID == "":
			if known {
				known = false
				if closing() {
					return false
				}
				log.Info("this node knows no leader now: an election is under way, or the leader cannot be reached", "last-leader", string(last), "term", r.CurrentTerm())
			}
		case lo.LeaderID != last || !known:
			if lo.LeaderID != last {
				last = lo.LeaderID
				c.Inc()
			}
			known = true
			if lo.LeaderID == self {
				log.Info("this node leads the cluster", "term", r.CurrentTerm())
			} else {
				log.Info("following a leader", "leader", string(lo.LeaderID), "leader-raft-addr", string(lo.LeaderAddr), "term", r.CurrentTerm())
			}
		}
		return false
	}))
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.records, c.bytes, c.oldest, c.inProgress, c.oldestInProgress,
		c.disk, c.buckets, c.state, c.term, c.commit, c.applied, c.fsmApplied, c.clusterTime, c.leader, c.filterReady,
		c.applyLag, c.maxRetention, c.retention, c.width, c.leaseExpired, c.stalls, c.stallSeconds} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	now := c.n.clock.NowMs()
	age := func(ms int64) float64 {
		if ms == 0 || ms > now {
			return 0
		}
		return float64(now-ms) / 1000
	}
	if s, err := c.n.db.Stats(); err == nil {
		g(c.records, float64(s.Records))
		g(c.bytes, float64(s.Bytes))
		g(c.oldest, age(s.OldestCreatedMs))
		g(c.inProgress, float64(s.InProgress))
		g(c.oldestInProgress, age(s.OldestInProgressCreated))
		g(c.leaseExpired, float64(s.LeaseExpired))
		g(c.disk, float64(s.DiskBytes))
		g(c.buckets, float64(s.Buckets))
	}
	st := c.n.raft.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s == st {
			v = 1
		}
		g(c.state, v, s.String())
	}
	g(c.term, float64(c.n.term()))
	commit := c.n.raft.CommitIndex()
	meta := c.n.db.Meta()
	g(c.commit, float64(commit))
	g(c.applied, float64(c.n.raft.AppliedIndex()))
	g(c.fsmApplied, float64(meta.Applied))
	// The FSM never sees no-op and barrier entries, so commit - applied
	// stays above 0 on an idle node whose last entries are such; the check
	// that readiness uses (at most 64 log reads) tells that case apart.
	lag := 0.0
	if commit > meta.Applied && !c.n.fsmCaughtUp(commit) {
		lag = float64(commit - meta.Applied)
	}
	g(c.applyLag, lag)
	g(c.maxRetention, float64(meta.MaxRetentionMs)/1000)
	g(c.retention, float64(meta.RetentionMs)/1000)
	g(c.width, float64(meta.Width)/1000)
	g(c.clusterTime, float64(now)/1000)
	ready := 0.0
	if c.n.db.FilterReady() {
		ready = 1
	}
	g(c.filterReady, ready)
	stalls, stalled := c.n.db.WriteStalls()
	ch <- prometheus.MustNewConstMetric(c.stalls, prometheus.CounterValue, float64(stalls))
	ch <- prometheus.MustNewConstMetric(c.stallSeconds, prometheus.CounterValue, stalled.Seconds())
	has := 0.0
	if addr, _ := c.n.raft.LeaderWithID(); addr != "" {
		has = 1
	}
	g(c.leader, has)
}

func observeSince(h prometheus.Histogram, t time.Time) { h.Observe(time.Since(t).Seconds()) }

var _ prometheus.Collector = (*stateCollector)(nil)
