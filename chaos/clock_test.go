package chaos

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// claimAt is an acknowledged claim called at call, answered at ret
// (seconds into the run), decided at cluster time base+ms.
func claimAt(id int, call, ret float64, ms int64) *Op {
	const base = 1_800_000_000_000
	return &Op{ID: id, Kind: KindClaim, Outcome: OK, Status: 201, Node: "n1", Principal: "p0", Endpoint: "POST /a", Key: "k",
		Call: int64(call * 1e9), Return: int64(ret * 1e9), ClusterMs: base + ms}
}

// Cluster time that follows real time, or falls behind it (a pause
// counted for at most ttl.RewindAfter, an outage of the whole cluster), is
// sound: records live longer, never shorter.
func TestClockChecksAcceptTimeThatNeverRunsAhead(t *testing.T) {
	var ops []*Op
	for i := range 50 {
		c := float64(i) * 0.2
		ops = append(ops, claimAt(i, c, c+0.05, int64(c*1000)+20))
	}
	// Every node stopped from 10 s to 25 s; the leader counts 5 s of it.
	for i := range 50 {
		c := 25.1 + float64(i)*0.2
		ops = append(ops, claimAt(100+i, c, c+0.05, int64((c-10)*1000)+20))
	}
	// Overlapping calls may be decided in either order; answers without
	// a time, replays and lost answers say nothing.
	ops = append(ops, claimAt(200, 34, 36, 24_920), claimAt(201, 34.5, 35, 24_620),
		&Op{ID: 202, Kind: KindClaim, Outcome: OK, Status: 200, Call: 36e9, Return: 37e9, ClusterMs: 1},
		&Op{ID: 203, Kind: KindClaim, Outcome: Info, Status: 0, Call: 36e9, Return: 37e9})
	require.Empty(t, ClockChecks(ops))
}

// The bug the pause nemesis exists for (fixed by ttl.Clock.StampMs): a
// leader that stayed leader through a 30 s pause of every node stamped its
// reading; its first entry was decided at the capped time (10 s past the
// last one) and the next moved cluster time on by the rest. A claim called
// 22 s into the pause and decided in that first entry got a record and a
// lease that ran out 11.9 s early for its caller.
func TestClockChecksFindTimeThatRanAheadAfterAPause(t *testing.T) {
	var ops []*Op
	for i := range 50 {
		c := float64(i) * 0.2
		ops = append(ops, claimAt(i, c, c+0.05, int64(c*1000)))
	}
	// Paused from 10 s to 40 s. Op 60 was called during the pause and
	// decided in the first entry after it, at 10 s + MaxStep.
	ops = append(ops, claimAt(60, 32, 40.1, 20_000))
	// The next entries: cluster time caught up with the reading.
	for i := range 5 {
		c := 40.2 + float64(i)*0.2
		ops = append(ops, claimAt(70+i, c, c+0.05, int64(c*1000)))
	}
	v := ClockChecks(ops)
	require.Len(t, v, 1, "one report per claim that ran out early: %v", v)
	require.Equal(t, VClockAhead, v[0].Kind)
	require.Equal(t, []int{60, 70}, v[0].Ops, "the claim and the later one that shows it most")
	require.Contains(t, v[0].Detail, "run out 11.")
	require.Contains(t, v[0].Detail, "(5 later claims show it)")

	// Within the slack: not reported.
	ops[50].ClusterMs += 11_500
	require.Empty(t, ClockChecks(ops))
}

func TestPauseForSpansMinPauseToMax(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var lo, hi time.Duration = time.Hour, 0
	for range 2000 {
		d := PauseFor(rnd, 30*time.Second)
		require.GreaterOrEqual(t, d, MinPause)
		require.LessOrEqual(t, d, 30*time.Second)
		require.Zero(t, d%(100*time.Millisecond), d)
		lo, hi = min(lo, d), max(hi, d)
	}
	require.Less(t, lo, 2*time.Second, "short pauses: under an election")
	require.Greater(t, hi, 29*time.Second, "long ones: past 2 x ttl.MaxStep")
	require.Equal(t, MinPause, PauseFor(rnd, MinPause))
	require.Equal(t, MinPause, PauseFor(rnd, 0))
	require.Greater(t, DefaultPauseMax, 10*time.Second, "the default must reach past ttl.MaxStep, where the pause bug was")
}

func TestValidatePauseMax(t *testing.T) {
	good := Config{Nodes: 3, Duration: time.Minute, Clients: 1, Rate: 1, Binary: "/bin/sh", InjectInto: "n1", Out: "x",
		ReadyBound: 30 * time.Second, HTTPPort: 17070, RaftPort: 17071, Timeout: 2 * time.Second, CheckTimeout: time.Minute}
	for _, d := range []time.Duration{0, MinPause, 30 * time.Second, MaxPauseMax} {
		c := good
		c.PauseMax = d
		require.NoError(t, c.Validate(), d)
	}
	for _, d := range []time.Duration{500 * time.Millisecond, -time.Second, 3 * time.Minute} {
		c := good
		c.PauseMax = d
		require.ErrorContains(t, c.Validate(), "--pause-max "+d.String()+" must be from 1s to 2m0s")
	}
}

// A seed repeats a pause schedule only with the same --pause-max, so the
// summary names it when the pause nemesis ran.
func TestSummaryNamesThePauseMax(t *testing.T) {
	var b strings.Builder
	(&Report{Config: Config{Nodes: 1, Nemeses: []string{"pause"}, PauseMax: time.Minute}, Check: &CheckResult{}}).Summary(&b)
	require.Contains(t, b.String(), "pause max 1m0s")
	b.Reset()
	(&Report{Config: Config{Nodes: 3, Nemeses: []string{"kill"}}, Check: &CheckResult{}}).Summary(&b)
	require.NotContains(t, b.String(), "pause max")
}

// A claim whose answer was lost is repeated with the same claim_id
// (followUp), and the store answers the attempt it already granted: 201
// with that attempt's lease, decided before the repeat's call. Taken as
// decided within the repeat's call and return, it made cluster time look
// as far ahead as the repeat came late, in a sound run.
func TestClockChecksDateARepeatedClaimFromItsFirstCall(t *testing.T) {
	var ops []*Op
	for i := range 20 {
		c := float64(i) * 0.2
		ops = append(ops, claimAt(i, c, c+0.05, int64(c*1000)+20))
	}
	// Decided at 4.02 s; the answer lost (the call timed out at 14 s).
	lost := &Op{ID: 50, Kind: KindClaim, Outcome: Info, Principal: "p0", Endpoint: "POST /a", Key: "k2", ClaimID: "c1-7", Call: 4e9, Return: 14e9}
	again := claimAt(51, 14.5, 14.55, 4020)
	again.Key, again.ClaimID = "k2", "c1-7"
	ops = append(ops, lost, again)
	for i := range 20 {
		c := 15 + float64(i)*0.2
		ops = append(ops, claimAt(100+i, c, c+0.05, int64(c*1000)+20))
	}
	require.Empty(t, ClockChecks(ops))
}
