package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A full disk, on a small tmpfs, under real processes: writes are refused
// with 507 storage_full, reads go on, the node neither crashes nor loses
// what it acknowledged, and it takes writes again by itself once space is
// back; it also starts with its disk full. And a second `idem serve` on a
// data dir in use says which process holds it.

// tmpfs mounts a tmpfs of size at a fresh directory, for the length of the
// test. Mounting needs root (CI runs tests as root).
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount a small tmpfs (mount -t tmpfs) and fill it; CI runs the tests as root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs here (%v: %s); run as root where mount works", err, strings.TrimSpace(string(out)))
	}
	// Cleanups run last first: the processes (registered later) are
	// killed, then this unmounts, then TempDir is removed.
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillDisk writes a file at path until the filesystem has no byte left.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4096} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				require.ErrorIs(t, err, syscall.ENOSPC)
				break
			}
		}
	}
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(filepath.Dir(path), &st))
	require.Zero(t, st.Bavail, "the disk is not full")
}

// fillDiskTo appends to the file at path until the filesystem has at most
// leave bytes free, when it has at least over bytes free; it does nothing
// otherwise.
func fillDiskTo(t *testing.T, path string, over, leave uint64) {
	t.Helper()
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(filepath.Dir(path), &st))
	free := st.Bavail * uint64(st.Bsize)
	if free < over {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 1<<20)
	for n := free - leave; n > 0; {
		chunk := min(n, uint64(len(buf)))
		if _, err := f.Write(buf[:chunk]); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return
		}
		n -= chunk
	}
}

// diskKeys are keys whose writes were acknowledged, with the stored
// response of those that were completed.
type diskKeys struct {
	mu    sync.Mutex
	acked map[string]string // key -> completed response body ("" if only claimed)
}

func (k *diskKeys) add(key, body string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.acked[key] = body
}

func (k *diskKeys) snapshot() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := make(map[string]string, len(k.acked))
	for key, v := range k.acked {
		m[key] = v
	}
	return m
}

// requireAcked reads every acknowledged key back (linearizable reads,
// retried through a leader change) and checks completed responses
// byte for byte.
func requireAcked(t *testing.T, addr string, keys *diskKeys) {
	t.Helper()
	requireAckedAs(t, addr, keys, "")
}

// requireAckedFull is requireAcked on a node whose disk is full: with
// stale reads of its applied state, which is what DISK.md promises
// there (a linearizable read waits for applies, and with no space left
// below the floor they wait for space: it answers 503 after a while).
func requireAckedFull(t *testing.T, addr string, keys *diskKeys) {
	t.Helper()
	requireAckedAs(t, addr, keys, "stale")
}

func requireAckedAs(t *testing.T, addr string, keys *diskKeys, consistency string) {
	t.Helper()
	for key, body := range keys.snapshot() {
		var a answer
		waitFor(t, 15*time.Second, "read of acknowledged "+key, func() (bool, string) {
			a = call("GET", addr, recordPath(key, consistency), "")
			if a.err == nil && a.code == 200 {
				return true, ""
			}
			require.True(t, a.err != nil || a.unavailable503(), "read of acknowledged %s: %s", key, a)
			return false, a.String()
		})
		var r recordAnswer
		require.NoError(t, json.Unmarshal(a.body, &r))
		if body == "" {
			continue
		}
		require.Equal(t, "completed", r.Record.State, "%s", a)
		require.NotNil(t, r.Record.Response)
		require.Equal(t, body, string(r.Record.Response.Body), "stored response of %s", key)
	}
}

// writeLoad claims fresh keys (and completes every fourth) until stop,
// recording what was acknowledged and counting 507s.
func writeLoad(addr, prefix string, keys *diskKeys, stop chan struct{}) (*sync.WaitGroup, *int64) {
	var wg sync.WaitGroup
	full := new(int64)
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("%s-%d", prefix, i)
			a := call("POST", addr, "/v1/claim", claimReq(key, "c-"+key))
			if a.err != nil || a.code != 201 {
				if a.code == 507 {
					mu.Lock()
					*full++
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if i%4 != 0 {
				keys.add(key, "")
				continue
			}
			var c claimedAnswer
			json.Unmarshal(a.body, &c)
			body := strings.Repeat("r", 512) + key
			if a := call("POST", addr, "/v1/complete", completeReq(key, c.Token, body)); a.err == nil && a.code == 200 {
				keys.add(key, body)
			} else {
				keys.add(key, "")
			}
		}
	}()
	return &wg, full
}

// storageFull507 is the 507 storage_full problem document.
func storageFull507(a answer) bool {
	return a.err == nil && a.code == 507 && a.problemCode() == "storage_full" &&
		strings.HasPrefix(a.hdr.Get("Content-Type"), "application/problem+json") && a.hdr.Get("Retry-After") != ""
}

func TestDiskFullRefusesWritesKeepsReadsAndRecovers(t *testing.T) {
	// On 128m the space left once the filler went was sometimes under
	// M + M/4 (raft-wal preallocates 64 MiB segments, Pebble its WAL
	// files), so the ballast was never made again: 1 run in 3 failed.
	mnt := tmpfs(t, "192m")
	dir := filepath.Join(mnt, "data")
	httpAddr, raftAddr := freePort(t), freePort(t)
	// 16 MiB: writes are refused under it, the ballast is 4 MiB.
	args := []string{"--min-free-disk", strconv.Itoa(16 << 20)}
	p := start(t, dir, httpAddr, raftAddr, args...)
	waitFor(t, 10*time.Second, "the ballast", func() (bool, string) {
		fi, err := os.Stat(filepath.Join(dir, "ballast"))
		return err == nil && fi.Size() == 4<<20, fmt.Sprint(err)
	})

	keys := &diskKeys{acked: map[string]string{}}
	stop := make(chan struct{})
	wg, refused := writeLoad(httpAddr, "before", keys, stop)
	waitFor(t, 10*time.Second, "some writes acknowledged", func() (bool, string) {
		return len(keys.snapshot()) >= 20, ""
	})

	// An attempt whose token is valid: complete and release of it are
	// writes the full disk must refuse (an invalid token would be refused
	// earlier, from the applied state, without a write).
	held := claimOK(t, httpAddr, "held-before-full")

	// Another process fills the disk while the node takes writes.
	fillDisk(t, filepath.Join(mnt, "filler"))
	probe := 0
	waitFor(t, 10*time.Second, "507 storage_full for a write", func() (bool, string) {
		probe++
		a := call("POST", httpAddr, "/v1/claim", claimReq(fmt.Sprintf("probe-%d", probe), ""))
		require.True(t, a.err != nil || a.code == 507 || a.code == 201 || a.unavailable503(), "write on a full disk: %s", a)
		if !storageFull507(a) {
			// Pebble may give space back right after the fill (a flush
			// deletes the memtable's old WAL, megabytes), and the node
			// then rightly takes writes until that is used: the other
			// process takes it again, down to under the node's minimum.
			fillDiskTo(t, filepath.Join(mnt, "filler"), 16<<20, 8<<20)
		}
		return storageFull507(a), a.String()
	})
	for _, op := range []struct{ path, body string }{
		{"/v1/complete", completeReq("held-before-full", held.Token, "x")},
		{"/v1/release", `{"principal":"` + cPrincipal + `","endpoint":"` + cEndpoint + `","key":"held-before-full","token":"` + held.Token + `"}`},
	} {
		a := call("POST", httpAddr, op.path, op.body)
		require.True(t, storageFull507(a), "%s on a full disk: %s", op.path, a)
	}
	time.Sleep(1500 * time.Millisecond) // let the writer meet a few hundred 507s
	close(stop)
	wg.Wait()
	require.Positive(t, *refused, "the writer never met 507")
	// Pebble may give space back after the fill (an obsolete file
	// deleted), leaving the free space above M/8: fill that too until
	// the node gives up its ballast.
	waitFor(t, 10*time.Second, "the ballast removed", func() (bool, string) {
		if strings.Contains(p.logs.String(), "removed the ballast") {
			return true, ""
		}
		fillDisk(t, filepath.Join(mnt, "filler"))
		return false, "still in place"
	})

	select {
	case <-p.done:
		t.Fatalf("the node exited on a full disk: %v", p.err)
	default:
	}
	requireAckedFull(t, httpAddr, keys)
	code, body := get(t, httpAddr, "/healthz")
	require.Equal(t, 200, code, "%s", body)
	require.Equal(t, 1.0, metric(t, httpAddr, "idem_storage_full"))
	require.Less(t, metric(t, httpAddr, "idem_disk_free_bytes"), float64(16<<20))
	// One line per spell of low space, not one per refused write (the
	// fills above can make two spells if Pebble gave space back between).
	// The guard marks the disk full, as the metric above showed, before it
	// logs the spell's line: a spell just begun may not be in the log yet.
	var logs string
	waitFor(t, 10*time.Second, "one line per spell, not one per refused write", func() (bool, string) {
		logs = p.logs.String()
		low, recovered := strings.Count(logs, "disk space low"), strings.Count(logs, "disk space recovered")
		return low == 1+recovered, fmt.Sprintf("%d lines of low space, %d of space recovered", low, recovered)
	})
	require.Contains(t, logs, "removed the ballast")
	require.NotContains(t, logs, "panic")

	// Space comes back: writes resume by themselves, the ballast returns.
	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))
	waitFor(t, 10*time.Second, "writes accepted again", func() (bool, string) {
		a := call("POST", httpAddr, "/v1/claim", claimReq("after-space", "c-after-space"))
		if a.code == 201 {
			keys.add("after-space", "")
			return true, ""
		}
		return false, a.String()
	})
	require.Equal(t, 0.0, metric(t, httpAddr, "idem_storage_full"))
	waitFor(t, 10*time.Second, "the ballast made again", func() (bool, string) {
		_, err := os.Stat(filepath.Join(dir, "ballast"))
		return err == nil, fmt.Sprint(err)
	})
	requireAcked(t, httpAddr, keys)

	// Restart with the disk full: kill -9 (the node gets no chance to see
	// it), fill the disk, start. It gives its ballast back to start, then
	// serves health, readiness and reads. Opening Pebble frees the space
	// its old WAL files held (it preallocates them), so the disk is filled
	// again: writes are refused with 507, and reads still work.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait()
	fillDisk(t, filepath.Join(mnt, "filler"))
	p = start(t, dir, httpAddr, raftAddr, args...)
	require.Contains(t, waitForLine(t, p.logs, serving), "removed the ballast so the node can start", "said before the start line")
	code, body = get(t, httpAddr, "/healthz")
	require.Equal(t, 200, code, "%s", body)
	requireAckedFull(t, httpAddr, keys)
	fillDisk(t, filepath.Join(mnt, "filler3"))
	waitFor(t, 10*time.Second, "507 after a restart on a full disk", func() (bool, string) {
		probe++
		a := call("POST", httpAddr, "/v1/claim", claimReq(fmt.Sprintf("probe-%d", probe), ""))
		require.True(t, a.err != nil || a.code == 507 || a.code == 201 || a.unavailable503(), "write on a full disk: %s", a)
		return storageFull507(a), a.String()
	})
	requireAckedFull(t, httpAddr, keys)

	// With no ballast left and the disk full it refuses to start, saying
	// why, rather than hang with its port open.
	// It stops either way: cleanly, or, when its applies wait for space
	// by then (an expiry tick, the log it replayed), after
	// --full-disk-stop-timeout with status 1, which loses nothing: the
	// reads after the restart below check it.
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(); err != nil {
		require.Contains(t, p.logs.String(), "stopping without waiting longer for disk space", "stop on a full disk: %v", err)
	} else {
		require.Contains(t, p.logs.String(), "stopped")
	}
	fillDisk(t, filepath.Join(mnt, "filler2"))
	q := launch(t, dir, httpAddr, raftAddr, args...)
	select {
	case <-q.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("start with a full disk and no ballast neither served nor exited:\n%s", q.logs)
	}
	require.Error(t, q.err)
	require.Contains(t, q.logs.String(), "free some space")

	for _, f := range []string{"filler", "filler2", "filler3"} {
		require.NoError(t, os.Remove(filepath.Join(mnt, f)))
	}
	start(t, dir, httpAddr, raftAddr, args...)
	claimOK(t, httpAddr, "after-restart")
	requireAcked(t, httpAddr, keys)
}

// A follower whose disk fills must not crash: the cluster goes on with the
// other two, and the follower catches up by itself once space is back.
func TestDiskFullFollowerCatchesUp(t *testing.T) {
	// Room for the raft log's segment (64 MiB) and the next one: writes
	// stop while the disk can still hold it (raftfsm.appendFloor).
	mnt := tmpfs(t, "192m")
	root := t.TempDir()
	var nodes []*cnode
	for i := 1; i <= 3; i++ {
		ip := fmt.Sprintf("127.0.0.%d", 10+i)
		n := &cnode{id: fmt.Sprintf("n%d", i), ip: ip, dir: filepath.Join(root, fmt.Sprintf("n%d", i)),
			http: freePortOn(t, ip), raft: freePortOn(t, ip)}
		// Frequent snapshots compact the raft log, so bolt has free pages
		// to store new entries in while the disk is full, and the entries
		// reach Pebble: that is how a follower used to die (a WAL write
		// failed, and Pebble panicked at the next commit).
		n.args = []string{"--node-id", n.id, "--min-free-disk", strconv.Itoa(16 << 20),
			"--snapshot-threshold", "64", "--trailing-logs", "16", "--snapshot-interval", "500ms"}
		if i > 1 {
			n.args = append(n.args, "--join", "")
		}
		nodes = append(nodes, n)
	}
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	n3.dir = filepath.Join(mnt, "n3")
	n2.args[len(n2.args)-1], n3.args[len(n3.args)-1] = n1.http, n1.http
	c := &testCluster{t: t, nodes: nodes}
	n1.p = start(t, n1.dir, n1.http, n1.raft, n1.args...)
	n2.p = launch(t, n2.dir, n2.http, n2.raft, n2.args...)
	n3.p = launch(t, n3.dir, n3.http, n3.raft, n3.args...)
	leader := c.waitStable(nodes...)
	require.NotEqual(t, n3, leader, "n1 bootstrapped and leads")

	keys := &diskKeys{acked: map[string]string{}}
	write := func(via, key string, i int) {
		body := strings.Repeat(fmt.Sprintf("%05d", i), 16<<10/5)
		completeOK(t, via, key, claimOK(t, via, key).Token, body)
		keys.add(key, body)
	}
	for i := 0; i < 64; i++ {
		write(leader.http, fmt.Sprintf("pre-%d", i), i)
	}
	time.Sleep(1500 * time.Millisecond) // snapshots compact the log
	// Full, then full again once n3 gave its ballast back: it can neither
	// store nor apply anything more.
	fillDisk(t, filepath.Join(mnt, "filler"))
	waitFor(t, 10*time.Second, "n3 sees its disk full", func() (bool, string) {
		a := call("GET", n3.http, "/metrics", "")
		return a.err == nil && strings.Contains(string(a.body), "\nidem_storage_full 1\n"), ""
	})
	waitFor(t, 10*time.Second, "n3 removes its ballast", func() (bool, string) {
		_, err := os.Stat(filepath.Join(n3.dir, "ballast"))
		return os.IsNotExist(err), fmt.Sprint(err)
	})
	fillDisk(t, filepath.Join(mnt, "filler2"))
	// The leader's disk is fine: writes go on, through n3 too. A MiB of
	// them, more than n3's Pebble holds in the space it already has.
	for i := 0; i < 64; i++ {
		via := leader.http
		if i%3 == 0 {
			via = n3.http
		}
		write(via, fmt.Sprintf("during-%d", i), i)
	}
	select {
	case <-n3.p.done:
		t.Fatalf("the follower exited on a full disk: %v", n3.p.err)
	default:
	}
	requireAcked(t, leader.http, keys)

	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))
	require.NoError(t, os.Remove(filepath.Join(mnt, "filler2")))
	claimOK(t, leader.http, "after")
	waitSameState(t, nodes...)
	for _, k := range []string{"pre-0", "during-63", "after"} {
		a := call("GET", n3.http, recordPath(k, "stale"), "")
		require.Equal(t, 200, a.code, "n3's own replica lacks %s: %s", k, a)
	}
	require.NotContains(t, n3.p.logs.String(), "panic")
}

// A second `idem serve` on a data dir in use names the process holding it,
// instead of "resource temporarily unavailable", and changes nothing.
func TestDataDirInUseNamesThePID(t *testing.T) {
	dir := t.TempDir()
	first := start(t, dir, freePort(t), freePort(t))
	before, err := os.ReadDir(dir)
	require.NoError(t, err)

	second := launch(t, dir, freePort(t), freePort(t))
	select {
	case <-second.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("a second serve on a data dir in use did not exit:\n%s", second.logs)
	}
	require.Error(t, second.err)
	out := second.logs.String()
	require.Contains(t, out, "is in use by another idem process")
	require.Regexp(t, regexp.MustCompile(`\(pid `+strconv.Itoa(first.cmd.Process.Pid)+`\)`), out)
	require.NotContains(t, out, "resource temporarily unavailable")

	// The same command again, ports and all (the README's, copied twice):
	// the data dir is named before the ports, which the first node holds.
	third := launch(t, dir, first.http, first.raft)
	select {
	case <-third.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("a second serve with the first's ports did not exit:\n%s", third.logs)
	}
	out = third.logs.String()
	require.Regexp(t, regexp.MustCompile(`is in use by another idem process \(pid `+strconv.Itoa(first.cmd.Process.Pid)+`\)`), out)
	require.NotContains(t, out, "address already in use")
	// Nothing above the refusal reads as a node that started (a docs walk
	// saw "no --auth-file: the API is open to anyone ..." first).
	require.NotContains(t, out, "no --auth-file")
	require.NotContains(t, out, "no TLS")

	after, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Equal(t, len(before), len(after), "the second process changed the data dir")
	code, body := post(t, first.http, "/v1/claim", claimBody)
	require.Equal(t, 201, code, "the first node must be untouched: %s", body)
}

// A leader whose applies wait for disk space answers a linearizable read
// 503 (retry) as DISK.md says, while stale reads of what it applied go on.
// The read hung instead, for as long as the disk stayed full: its Barrier
// and VerifyLeader never resolve while raft's leader loop waits on the
// FSM, and an HTTP request's context has no deadline.
func TestDiskFullLinearizableReadAnswers503(t *testing.T) {
	mnt := tmpfs(t, "192m")
	dir := filepath.Join(mnt, "data")
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr, "--min-free-disk", strconv.Itoa(16<<20))
	claimOK(t, httpAddr, "before-full")
	waitFor(t, 60*time.Second, "applies waiting for disk space", func() (bool, string) {
		if strings.Contains(p.logs.String(), "raft log applies wait for free space") {
			return true, ""
		}
		fillDisk(t, filepath.Join(mnt, "filler"))
		// A write the leader refuses (507) or stores in its log gives the
		// FSM an entry to apply; so do the expiry ticks.
		call("POST", httpAddr, "/v1/claim", claimReq(fmt.Sprintf("fill-%d", time.Now().UnixNano()), ""))
		return false, "applies still go on"
	})
	a := call("GET", httpAddr, recordPath("before-full", ""), "")
	require.True(t, a.unavailable503(), "a linearizable read on a leader whose applies wait must answer 503: %s", a)
	a = call("GET", httpAddr, recordPath("before-full", "stale"), "")
	require.Equal(t, 200, a.code, "%s", a)

	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))
	waitFor(t, 20*time.Second, "linearizable reads once space is back", func() (bool, string) {
		a := call("GET", httpAddr, recordPath("before-full", ""), "")
		return a.code == 200, a.String()
	})
}

// A node whose raft log applies wait for disk space stops on SIGTERM or
// SIGINT after --full-disk-stop-timeout, with status 1 and a warning
// saying what it left, instead of waiting for space forever; restarted on
// the same data dir once space is back, it has every acknowledged record,
// and a stop with room on the disk is clean again.
func TestDiskFullStopIsBounded(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) { testDiskFullStopIsBounded(t, sig) })
	}
}

func testDiskFullStopIsBounded(t *testing.T, sig syscall.Signal) {
	mnt := tmpfs(t, "192m")
	dir := filepath.Join(mnt, "data")
	httpAddr, raftAddr := freePort(t), freePort(t)
	args := []string{"--min-free-disk", strconv.Itoa(16 << 20), "--full-disk-stop-timeout", "2s"}
	p := start(t, dir, httpAddr, raftAddr, args...)
	keys := &diskKeys{acked: map[string]string{}}
	for i := 0; i < 32; i++ {
		key := fmt.Sprintf("before-%d", i)
		c := claimOK(t, httpAddr, key)
		if i%2 == 0 {
			keys.add(key, "")
			continue
		}
		body := strings.Repeat("r", 512) + key
		completeOK(t, httpAddr, key, c.Token, body)
		keys.add(key, body)
	}
	n := 0
	// Usually an apply comes to wait at the disk guard. Under load the
	// disk can fill first under a Pebble write (a flush, or the FSM's own
	// commit): the FSM may then be held inside Pebble, where no apply
	// reaches the guard to say so, and a stop waits on it just the same.
	var pebbleSince time.Time
	waitFor(t, 60*time.Second, "applies waiting for disk space", func() (bool, string) {
		logs := p.logs.String()
		if strings.Contains(logs, "raft log applies wait for free space") {
			return true, ""
		}
		if strings.Contains(logs, "Pebble writes wait for free space") {
			if pebbleSince.IsZero() {
				pebbleSince = time.Now()
			}
			if time.Since(pebbleSince) > 5*time.Second {
				return true, ""
			}
		}
		fillDisk(t, filepath.Join(mnt, "filler"))
		// A write stored in the log, or refused (507), gives the FSM an
		// entry to apply; so do the expiry ticks.
		n++
		key := fmt.Sprintf("fill-%d", n)
		if a := call("POST", httpAddr, "/v1/claim", claimReq(key, "")); a.err == nil && a.code == 201 {
			keys.add(key, "")
		}
		return false, "applies still go on"
	})

	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s with applies waiting for disk space: the node did not exit:\n%s", sig, p.logs)
	}
	logs := p.logs.String()
	require.NotContains(t, logs, "panic")
	if applyHeld := strings.Contains(logs, "raft log applies wait for free space"); applyHeld || p.err != nil {
		// An apply was held: the stop gave up on it, said so, and exited 1.
		var exit *exec.ExitError
		require.ErrorAs(t, p.err, &exit, "a stop that left entries unapplied must not exit 0:\n%s", p.logs)
		require.Equal(t, 1, exit.ExitCode(), "%s", p.logs)
		require.Contains(t, logs, "level=WARN msg=\"stopping without waiting longer for disk space")
		require.Contains(t, logs, "idem serve: raftfsm: close abandoned")
	}

	// Space is back: the same data dir starts (Pebble's lock, the raft
	// log and the snapshots are as kill -9 leaves them) and holds every
	// acknowledged record.
	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))
	p = start(t, dir, httpAddr, raftAddr, args...)
	requireAcked(t, httpAddr, keys)
	claimOK(t, httpAddr, "after-restart")

	// With room on the disk, a stop is clean as before.
	require.NoError(t, p.cmd.Process.Signal(sig))
	require.NoError(t, p.wait(), "%s", p.logs)
	logs = p.logs.String()
	require.Contains(t, logs, "msg=stopped")
	require.NotContains(t, logs, "stopping without waiting longer")
}

// A negative --full-disk-stop-timeout is refused at once, naming the flag,
// before the data dir is created.
func TestServeRefusesNegativeFullDiskStopTimeout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	code, out := serveExit(t, "--data-dir", dir, "--http-addr", freePort(t), "--raft-addr", freePort(t), "--full-disk-stop-timeout", "-1s")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "idem serve: --full-disk-stop-timeout -1s must be 0 or more")
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "refused after creating the data dir")
}

// On a 64 MiB disk raft-wal cannot create its first segment file, which it
// preallocates whole (64 MiB), and the node said "free that much" to an
// operator who had that much free. It now says the disk is too small for a
// node and what one needs; on a disk large enough but nearly full, it says
// how much more to free.
func TestDiskTooSmallForTheRaftLogSaysSo(t *testing.T) {
	exitOutput := func(p *proc) string {
		t.Helper()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("the node did not exit:\n%s", p.logs)
		}
		var ee *exec.ExitError
		require.ErrorAs(t, p.err, &ee, "%s", p.logs)
		require.Equal(t, 1, ee.ExitCode(), "%s", p.logs)
		return p.logs.String()
	}

	small := tmpfs(t, "64m")
	for _, args := range [][]string{nil, {"--min-free-disk", "0"}} {
		out := exitOutput(launch(t, filepath.Join(small, "data"), freePort(t), freePort(t), args...))
		require.Contains(t, out, "it preallocates each one whole, 64 MiB, and the disk holding "+filepath.Join(small, "data")+" is too small for a node: it is 64 MiB in all", "%v", args)
		require.Contains(t, out, "Give the data dir a larger disk", "%v", args)
		require.NotContains(t, out, "free that much", "%v", args)
	}
	out := exitOutput(launch(t, filepath.Join(small, "data"), freePort(t), freePort(t)))
	require.Contains(t, out, "more than 448 MiB", "two 64 MiB segments, --min-free-disk 256 MiB and its 64 MiB ballast")

	// Large enough, but nearly full: free what is missing.
	big := tmpfs(t, "320m")
	fillDiskTo(t, filepath.Join(big, "filler"), 0, 40<<20)
	out = exitOutput(launch(t, filepath.Join(big, "data"), freePort(t), freePort(t), "--min-free-disk", "0"))
	require.Regexp(t, `the disk holding \S+ has [\d.]+ MiB free: free at least [\d.]+ MiB more on it`, out)
	require.NotContains(t, out, "too small")
}

// A start refused before anything is written (a disk too full to open
// the stores safely) says "nothing was changed" and leaves no new data dir behind
// (raftfsm removes the dir it made). serve now makes an absent dir itself,
// to lock it before anything is in it, and the refused start left the
// empty dir raftfsm no longer knew it had made. An existing dir stays.
func TestRefusedStartOnAnAbsentDataDirLeavesNoDir(t *testing.T) {
	full := tmpfs(t, "64m")
	fillDiskTo(t, filepath.Join(full, "filler"), 0, 8<<20) // under an eighth of --min-free-disk's 256 MiB
	data := filepath.Join(full, "data")
	exit := func() string {
		t.Helper()
		p := launch(t, data, freePort(t), freePort(t))
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("the node did not exit:\n%s", p.logs)
		}
		require.Error(t, p.err, "%s", p.logs)
		return p.logs.String()
	}
	out := exit()
	require.Contains(t, out, "the node needs to open its stores safely")
	require.NoDirExists(t, data, "the refused start left the data dir it made:\n%s", out)

	require.NoError(t, os.Mkdir(data, 0o700))
	out = exit()
	require.Contains(t, out, "the node needs to open its stores safely")
	require.DirExists(t, data, "an existing data dir is the operator's")
}

// A one-node store with its guard off (--min-free-disk 0) whose disk fills
// as the raft log makes its next segment: the log stops, the node cannot
// lead, and a write is refused 507 storage_full naming the stopped log,
// not 503 "no leader" for as long as the disk stays full. Reads of what
// was acknowledged go on; given room (the tmpfs grown), the log reopens
// by itself and writes are taken again.
func TestOneNodeStoppedLogAnswers507(t *testing.T) {
	// 100 MiB: the first 64 MiB segment fits, the next one never does.
	mnt, httpAddr, p := guardOffNode(t, "100m")
	keys := &diskKeys{acked: map[string]string{}}
	stopped := func() bool { return strings.Contains(p.logs.String(), "could not make its next segment file") }
	pad := strings.Repeat("r", 32<<10) // compressible: Pebble stays small
	wg := fillUntil(httpAddr, keys, 8, func(_ *rand.Rand, key string) string { return pad + key }, stopped)
	waitFor(t, 120*time.Second, "the raft log stopped for want of space", func() (bool, string) {
		return stopped(), fmt.Sprintf("%d keys acknowledged", len(keys.snapshot()))
	})
	wg.Wait()

	var a answer
	waitFor(t, 30*time.Second, "507 storage_full for a write", func() (bool, string) {
		a = call("POST", httpAddr, "/v1/claim", claimReq("after-stop", ""))
		require.True(t, a.err != nil || storageFull507(a) || a.unavailable503(), "write with the log stopped: %s", a)
		return storageFull507(a), a.String()
	})
	require.Contains(t, string(a.body), "raft log is stopped", "%s", a)
	// It said "Reads still work", and a client's next (linearizable) read
	// got 503: it names the reads that do.
	require.NotContains(t, string(a.body), "Reads still work", "%s", a)
	require.Contains(t, string(a.body), "consistency=stale", "%s", a)
	a = call("GET", httpAddr, recordPath("after-stop", ""), "")
	require.True(t, a.err != nil || a.unavailable503(), "a linearizable read needs a leader, not space: %s", a)
	for key := range keys.snapshot() {
		a = call("GET", httpAddr, recordPath(key, "stale"), "")
		require.Equal(t, 200, a.code, "a stale read of an acknowledged key: %s", a)
		break
	}
	requireAckedFull(t, httpAddr, keys)

	out, err := exec.Command("mount", "-o", "remount,size=300m", mnt).CombinedOutput()
	require.NoError(t, err, "%s", out)
	waitFor(t, 60*time.Second, "writes taken again once there is room", func() (bool, string) {
		a := call("POST", httpAddr, "/v1/claim", claimReq("after-room", ""))
		return a.err == nil && a.code == 201, a.String()
	})
	requireAcked(t, httpAddr, keys)
}

// With the guard off (--min-free-disk 0) a disk that fills under Pebble's
// writes panicked the node inside Pebble ("panic: write .../fsm/000005.log:
// no space left on device", exit 2). Its writes now wait for space, saying
// so, as with the guard on: the node stays up, and once there is room
// (the tmpfs grown) it takes writes again with every acknowledged record.
func TestGuardOffFullDiskWaitsRatherThanPanics(t *testing.T) {
	// 72 MiB: the raft log's 64 MiB segment is made, Pebble fills the rest.
	mnt, httpAddr, p := guardOffNode(t, "72m")
	keys := &diskKeys{acked: map[string]string{}}
	waiting := func() bool { return strings.Contains(p.logs.String(), pebbleWaits) }
	panicked := func() bool { return strings.Contains(p.logs.String(), "panic:") }
	wg := fillUntil(httpAddr, keys, 4, incompressible, func() bool { return waiting() || panicked() })
	waitFor(t, 120*time.Second, "Pebble's writes waiting for space", func() (bool, string) {
		require.NotContains(t, p.logs.String(), "panic:", "the node panicked on the full disk")
		return waiting(), fmt.Sprintf("%d keys acknowledged", len(keys.snapshot()))
	})
	wg.Wait()
	time.Sleep(2 * time.Second)
	require.NotContains(t, p.logs.String(), "panic:")
	select {
	case <-p.done:
		t.Fatalf("the node exited on the full disk: %v\n%s", p.err, p.logs.String())
	default:
	}
	a := call("GET", httpAddr, "/healthz", "")
	require.Equal(t, 200, a.code, "%s", a)

	out, err := exec.Command("mount", "-o", "remount,size=400m", mnt).CombinedOutput()
	require.NoError(t, err, "%s", out)
	waitFor(t, 60*time.Second, "writes taken again once there is room", func() (bool, string) {
		a := call("POST", httpAddr, "/v1/claim", claimReq(fmt.Sprintf("after-room-%d", time.Now().UnixNano()), ""))
		return a.err == nil && a.code == 201, a.String()
	})
	// Logged by the write that waited, which need not be the one answered.
	waitForLine(t, p.logs, "disk space is back")
	requireAcked(t, httpAddr, keys)
}

// guardOffNode starts a node with its disk guard off (--min-free-disk 0)
// on a tmpfs of size, with args.
func guardOffNode(t *testing.T, size string, args ...string) (mnt, httpAddr string, p *proc) {
	mnt = tmpfs(t, size)
	httpAddr = freePort(t)
	p = start(t, filepath.Join(mnt, "data"), httpAddr, freePort(t), append([]string{"--min-free-disk", "0"}, args...)...)
	return mnt, httpAddr, p
}

// incompressible is a fill body Pebble cannot compress.
func incompressible(rng *rand.Rand, _ string) string {
	b := make([]byte, 24<<10)
	rng.Read(b)
	return base64.StdEncoding.EncodeToString(b)[:24<<10]
}

// pebbleWaits is the log line of a guard-off Pebble write held for space.
const pebbleWaits = "Pebble writes (--min-free-disk is 0) wait for free space"

// A stop while a guard-off Pebble write waits for space is bounded by
// --full-disk-stop-timeout as with the guard on: exit 1, saying why; the
// data dir then starts, once there is room, with every acknowledged record.
func TestGuardOffFullDiskStopIsBounded(t *testing.T) {
	mnt, httpAddr, p := guardOffNode(t, "72m", "--full-disk-stop-timeout", "2s")
	keys := &diskKeys{acked: map[string]string{}}
	waiting := func() bool { return strings.Contains(p.logs.String(), pebbleWaits) }
	wg := fillUntil(httpAddr, keys, 4, incompressible, func() bool { return waiting() || strings.Contains(p.logs.String(), "panic:") })
	waitFor(t, 120*time.Second, "Pebble's writes waiting for space", func() (bool, string) {
		return waiting(), fmt.Sprintf("%d keys acknowledged", len(keys.snapshot()))
	})
	wg.Wait()

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("SIGTERM with a Pebble write waiting for space: the node did not exit:\n%s", p.logs)
	}
	logs := p.logs.String()
	require.NotContains(t, logs, "panic")
	var exit *exec.ExitError
	require.ErrorAs(t, p.err, &exit, "a stop that left entries unapplied must not exit 0:\n%s", logs)
	require.Equal(t, 1, exit.ExitCode(), "%s", logs)
	require.Contains(t, logs, "--min-free-disk being 0) and closing the node still waited after 2s")

	out, err := exec.Command("mount", "-o", "remount,size=400m", mnt).CombinedOutput()
	require.NoError(t, err, "%s", out)
	p = start(t, filepath.Join(mnt, "data"), httpAddr, p.raft, "--min-free-disk", "0")
	requireAcked(t, httpAddr, keys)
	claimOK(t, httpAddr, "after-restart")
}

// fillUntil has writers goroutines claim fresh keys and complete them
// with body(rng, key) until done, recording in keys what was acknowledged.
func fillUntil(addr string, keys *diskKeys, writers int, body func(rng *rand.Rand, key string) string, done func() bool) *sync.WaitGroup {
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(rng *rand.Rand) {
			defer wg.Done()
			for !done() {
				key := fmt.Sprintf("fill-%d", next.Add(1))
				a := call("POST", addr, "/v1/claim", claimReq(key, ""))
				if a.err != nil || a.code != 201 {
					time.Sleep(20 * time.Millisecond) // the disk full: 503, then 507
					continue
				}
				var c claimedAnswer
				json.Unmarshal(a.body, &c)
				b := body(rng, key)
				if a := call("POST", addr, "/v1/complete", completeReq(key, c.Token, b)); a.err == nil && a.code == 200 {
					keys.add(key, b)
				} else {
					keys.add(key, "")
				}
			}
		}(rand.New(rand.NewSource(int64(w))))
	}
	return &wg
}
