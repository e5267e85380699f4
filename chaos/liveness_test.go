package chaos

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const sec = int64(time.Second)

// tl builds a recorded readiness timeline: times in seconds.
type tl []ReadySample

func (t tl) up(node string, at float64) tl {
	return append(t, ReadySample{Node: node, At: int64(at * float64(sec)), Ready: true})
}

func (t tl) down(node string, at float64, why string) tl {
	return append(t, ReadySample{Node: node, At: int64(at * float64(sec)), Detail: why})
}

func win(label string, start, end float64) Window {
	return Window{Label: label, Start: int64(start * float64(sec)), End: int64(end * float64(sec))}
}

const bound = 30 * time.Second

func TestLivenessExcusesNemesisWindowsAndTheBoundAfter(t *testing.T) {
	// Killed at 10s, restarted (healed) at 14s, ready 20s later: fine.
	samples := tl{}.up("n1", 0).up("n2", 0).down("n2", 10, "process not running").up("n2", 34)
	require.Empty(t, Liveness(samples, []Window{win("kill", 10, 14)}, bound, 100*sec))

	// Unready on its own (an election, a slow catch-up) for less than
	// the bound: fine; exactly the bound: fine.
	samples = tl{}.up("n1", 0).down("n1", 50, "503 no leader").up("n1", 80)
	require.Empty(t, Liveness(samples, nil, bound, 100*sec))
}

func TestLivenessReportsANodeThatNeverComesBack(t *testing.T) {
	why := "process not running: idem serve: raftfsm: ... Remove the whole data dir and join the node again"
	samples := tl{}.up("n1", 0).up("n2", 0).down("n2", 5, "process not running").down("n2", 9, why)
	v := Liveness(samples, []Window{win("quiet-restart", 4, 7)}, bound, 200*sec)
	require.Len(t, v, 1)
	require.Equal(t, VNotReady, v[0].Kind)
	require.Equal(t, "n2", v[0].Scope)
	require.Equal(t, 37*sec, v[0].At, "the bound runs from the heal")
	require.Contains(t, v[0].Detail, "last heal: quiet-restart at 7.0s")
	require.Contains(t, v[0].Detail, "still not ready when the run ended")
	require.Contains(t, v[0].Detail, "Remove the whole data dir", "the node's last words are in the summary")
}

// Later nemeses do not excuse a node for ever: only the time inside their
// windows is not counted.
func TestLivenessCountsTimeBetweenLaterNemeses(t *testing.T) {
	samples := tl{}.down("n3", 5, "503 has not applied the leader's commit index 17459 yet")
	windows := []Window{win("kill", 5, 10), win("pause", 20, 40), win("partition", 45, 55)}
	v := Liveness(samples, windows, bound, 300*sec)
	require.Len(t, v, 1)
	// Counted: 10-20 (10s), 40-45 (5s), 55-70 (15s).
	require.Equal(t, 70*sec, v[0].At)
	require.Contains(t, v[0].Detail, "last heal: partition at 55.0s")
	require.Contains(t, v[0].Detail, "has not applied the leader's commit index")
}

// Issue 9's bug 5: a follower restarted by the kill nemesis installed a
// snapshot, then applied nothing; /readyz said 503 for 44 s after the heal.
func TestLivenessCatchesAFollowerStuckAfterSnapshotInstall(t *testing.T) {
	samples := tl{}.up("n1", 0).up("n2", 0).up("n3", 0).
		down("n3", 218, "process not running").
		down("n3", 221, "503 this node has not applied the leader's commit index 17459 yet").
		up("n3", 265)
	v := Liveness(samples, []Window{win("kill", 218, 221)}, bound, 480*sec)
	require.Len(t, v, 1)
	require.Equal(t, 251*sec, v[0].At)
	require.Contains(t, v[0].Detail, "ready again at 265.0s")

	// The same node ready 25 s after the heal is no violation.
	ok := tl{}.down("n3", 218, "").up("n3", 246)
	require.Empty(t, Liveness(ok, []Window{win("kill", 218, 221)}, bound, 480*sec))
}

func TestLivenessSeparatesStretchesAndNodes(t *testing.T) {
	samples := tl{}.
		down("n1", 0, "a").up("n1", 20).down("n1", 100, "b").up("n1", 140).
		down("n2", 0, "c").up("n2", 10)
	v := Liveness(samples, nil, bound, 200*sec)
	require.Len(t, v, 1, "only n1's second stretch is over the bound")
	require.Equal(t, "n1", v[0].Scope)
	require.Equal(t, 130*sec, v[0].At)
	require.Contains(t, v[0].Detail, "last answer: b")
}

func TestMergeWindows(t *testing.T) {
	got := mergeWindows([]Window{win("b", 10, 20), win("a", 0, 5), win("c", 15, 30), win("d", 30, 31)})
	require.Equal(t, []Window{win("a", 0, 5), win("b", 10, 31)}, got)
}

func TestProgressFindsAStalledCluster(t *testing.T) {
	var ops []*Op
	ok := func(at float64) { ops = append(ops, &Op{Outcome: OK, Return: int64(at * float64(sec))}) }
	for s := 1.0; s < 20; s++ {
		ok(s)
	}
	// 20-60s: nothing succeeds, a membership event runs 22-30s.
	ops = append(ops, &Op{Outcome: Info, Return: 40 * sec})
	ok(60)
	ops = append(ops, &Op{Outcome: OK, Final: true, Return: 61 * sec}) // final checks do not count
	v := Progress(ops, []Window{win("membership", 22, 30)}, bound, 0, 100*sec)
	require.Len(t, v, 2)
	require.Equal(t, VNoProgress, v[0].Kind)
	require.Equal(t, 57*sec, v[0].At, "from the last success at 19s, 30s counted and the 8s of the window not")
	require.Contains(t, v[0].Detail, "the next one at 60.0s")
	require.Equal(t, 90*sec, v[1].At)
	require.Contains(t, v[1].Detail, "none until the clients stopped")

	// A pause of the clients inside a nemesis window is no stall.
	require.Empty(t, Progress(ops[:19], []Window{win("quiet-restart", 19, 100)}, bound, 0, 100*sec))
}

// The monitor records changes only, keeping the latest reason of an
// unready stretch.
func TestMonitorRecordsChanges(t *testing.T) {
	m := &Monitor{last: map[string]int{}}
	m.record("n1", 1, true, "")
	m.record("n1", 2, true, "")
	m.record("n1", 3, false, "503 no leader")
	m.record("n2", 3, true, "")
	m.record("n1", 4, false, "503 has not applied 10")
	m.record("n1", 5, true, "")
	require.Equal(t, []ReadySample{
		{Node: "n1", At: 1, Ready: true},
		{Node: "n1", At: 3, Detail: "503 has not applied 10"},
		{Node: "n2", At: 3, Ready: true},
		{Node: "n1", At: 5, Ready: true},
	}, m.Samples())
}

func TestWindowsRunFromStartToHeal(t *testing.T) {
	ws := Windows([]Event{
		{Kind: "kill", Start: 1, Healed: 5, End: 9},
		{Kind: "pause", Start: 10, End: 12}, // healed never marked
	})
	require.Equal(t, []Window{{Label: "kill", Start: 1, End: 5}, {Label: "pause", Start: 10, End: 12}}, ws)
}

// The summary shows why a node is down in one line: its own last words of
// its latest run, not the raft chatter or an earlier run's.
func TestLastWordsOfALogShowWhyTheNodeStopped(t *testing.T) {
	log := `=== chaos 2026-11-30T20:41:00Z: start /tmp/idem serve --node-id n2
time=2026-11-30T20:41:00Z level=INFO msg="listening"
time=2026-11-30T20:41:10Z level=ERROR msg="an earlier run's error"
=== chaos 2026-11-30T20:41:20Z: exited: signal: terminated

=== chaos 2026-11-30T20:41:21Z: start /tmp/idem serve --node-id n2 --snapshot-threshold 1
time=2026-11-30T20:41:21.239Z level=WARN msg="--trailing-logs 16 is low: a follower more than 16 entries behind (a restart, a pause of seconds under load) gets the whole state as a snapshot instead of the entries it lacks; keep it at 1024 or more (default 10240)"
time=2026-11-30T20:41:21.240Z level=INFO msg="no --auth-file: the API is open to anyone who can reach the loopback address"
time=2026-11-30T20:41:21.250Z level=ERROR msg="raft: failed to heartbeat to" component=raft peer=127.0.0.1:17071
idem serve: raftfsm: the state in n2/fsm (applied index 328) is older than the raft log's snapshot 3-329 (index 329). Remove the whole data dir and join the node again
=== chaos 2026-11-30T20:41:21.33Z: exited: exit status 1
`
	require.Equal(t, "idem serve: raftfsm: the state in n2/fsm (applied index 328) is older than the raft log's snapshot 3-329 (index 329). Remove the whole data dir and join the node again | exited: exit status 1", lastWords(log))
	require.Equal(t, "nothing in its log", lastWords("=== chaos x: start idem serve\ntime=1 level=INFO msg=up\n"))
}

// A node whose process was gone for most of an unready stretch is
// reported so, not with only its probe's last answer: in a 10-minute soak
// two of three nodes got SIGTERMs the harness never sent and stayed down
// for six minutes, and the violations said "last answer: 503 this node has
// no leader", the answer after the final healing started them again.
func TestLivenessSaysWhenTheProcessWasNotRunning(t *testing.T) {
	m := &Monitor{last: map[string]int{}}
	m.record("n2", 1*sec, true, "")
	m.record("n2", 10*sec, false, "503 no leader")
	m.record("n2", 11*sec, false, "process not running: exited: <nil>")
	m.record("n2", 12*sec, false, "process not running: exited: <nil>")
	m.record("n2", 370*sec, false, "503 this node has no leader")
	m.record("n2", 380*sec, true, "")
	v := Liveness(m.Samples(), nil, bound, 400*sec)
	require.Len(t, v, 1)
	require.Contains(t, v[0].Detail, "last answer: 503 this node has no leader")
	require.Contains(t, v[0].Detail, "its process was not running from 11.0s to 370.0s (exited: <nil>)")

	rep := &Report{Readiness: m.Samples(), Check: &CheckResult{}}
	var out bytes.Buffer
	rep.Summary(&out)
	require.Contains(t, out.String(), "(1 unready spells)", "one stretch, however many reasons")
}
