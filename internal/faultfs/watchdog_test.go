package faultfs

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const childEnv = "IDEM_FAULTFS_TEST_CHILD"

// A process serving a mount killed while its own requests to it wait (a
// test's -timeout, a kill by hand) ends, and leaves no mount behind: it
// stayed a zombie whose mount hung every process that touched it (stat,
// rm -rf, CI's cleanup) and go test, which waits for it, for good.
func TestKilledServerEndsAndLeavesNoMount(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		serveAndReadForever(dir)
		return
	}
	Skip(t)
	base := t.TempDir()
	mnt := filepath.Join(base, "mnt")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKilledServerEndsAndLeavesNoMount$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+base)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "serving" {
	}
	t.Cleanup(func() { abortLeft(t, mnt) })
	time.Sleep(300 * time.Millisecond) // its readers' requests in flight
	cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("the killed server's process has not ended 15 s after its kill (a zombie waiting on its own mount): %s", procState(cmd.Process.Pid))
	}
	deadline := time.Now().Add(5 * time.Second)
	for mounted(mnt) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("%s is still mounted 5 s after its server's process ended", mnt)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serveAndReadForever, the child: serves a mount and reads through it
// from goroutines of its own, until killed.
func serveAndReadForever(base string) {
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	os.Mkdir(backing, 0o755)
	os.Mkdir(mnt, 0o755)
	os.WriteFile(filepath.Join(backing, "f"), make([]byte, 1<<20), 0o644)
	f, err := New(backing, mnt)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(3)
	}
	_ = f
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			for {
				os.Stat(filepath.Join(mnt, "f"))
				os.ReadFile(filepath.Join(mnt, "f"))
			}
		}()
	}
	os.Stdout.WriteString("serving\n")
	wg.Wait()
}

// mounted returns mnt's "major:minor" in this process's mount table, ""
// when it is not mounted.
func mounted(mnt string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == mnt {
			return f[2]
		}
	}
	return ""
}

// abortLeft ends and detaches a mount the test left (its watchdog did not).
func abortLeft(t *testing.T, mnt string) {
	dev := mounted(mnt)
	if dev == "" {
		return
	}
	_, minor, _ := strings.Cut(dev, ":")
	if n, err := strconv.ParseUint(minor, 10, 32); err == nil {
		Abort(uint32(n))
	}
	Detach(mnt)
	t.Logf("aborted and detached %s, left mounted", mnt)
}

func procState(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return strings.TrimSpace(string(b))
}
