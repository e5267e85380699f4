package faultfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A process serving a mount that ends while one of its own requests to it
// waits (a store it runs reading through it, as Pebble may: New) never
// ends: the request waits for an answer only the dying process could give.
// It stays a zombie with a thread in the kernel, its mount hangs every
// process that touches it (stat, df, rm -rf of the temporary directory,
// CI's cleanup), and `go test`, waiting for it, hangs past its -timeout
// (the test binary's own alarm is such an end, and so is the kill of a
// test run by hand). The watchdog, a process of its own started by New,
// ends the mount's FUSE connection (fusectl's abort: the waiting request
// fails, the process ends) and detaches the mount once its server's
// process has ended, however it ended; Unmount stops it.

// watchdogEnv, set in the watchdog's environment: "pid conn mnt".
const watchdogEnv = "IDEM_FAULTFS_WATCHDOG"

func init() {
	if v := os.Getenv(watchdogEnv); v != "" {
		os.Exit(watchdog(v))
	}
}

// fusectl is where the kernel's FUSE connections are controlled.
const fusectl = "/sys/fs/fuse/connections"

// startWatchdog starts the watchdog of the mount at mnt served by this
// process: the test binary run again, which init turns into it.
func startWatchdog(mnt string) (*os.Process, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		return nil, err
	}
	// The connection's number: the minor of the mount's device.
	conn := st.Dev&0xff | (st.Dev>>12)&0xfff00
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s", watchdogEnv, os.Getpid(), conn, mnt))
	// Its own process group: a kill of the test's does not take it along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go cmd.Wait() // reaped when Unmount stops it
	return cmd.Process, nil
}

// ended reports whether the process pid has ended: gone, or a zombie
// (whose threads may still wait on the mount).
func ended(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X' || killPending(pid)
}

// killPending reports whether pid has a SIGKILL pending that it has not
// acted on: a thread of it waits in the kernel on a FUSE request its own
// (now stopped) threads were to answer, in uninterruptible sleep (state D,
// not yet a zombie: seen under CI's load), and cannot end until the
// connection is aborted.
func killPending(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "ShdPnd" && name != "SigPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
			return true
		}
	}
	return false
}

func watchdog(v string) int {
	f := strings.SplitN(v, " ", 3)
	if len(f) != 3 {
		return 2
	}
	pid, err1 := strconv.Atoi(f[0])
	conn, err2 := strconv.ParseUint(f[1], 10, 32)
	if err1 != nil || err2 != nil {
		return 2
	}
	for !ended(pid) {
		time.Sleep(100 * time.Millisecond)
	}
	Abort(uint32(conn))
	Detach(f[2])
	return 0
}

// Abort ends FUSE connection conn (a mount's device minor): every request
// waiting on it fails, and the mount answers ENOTCONN until detached.
// It mounts fusectl first if it is not.
func Abort(conn uint32) error {
	ctl := filepath.Join(fusectl, strconv.FormatUint(uint64(conn), 10), "abort")
	if _, err := os.Stat(filepath.Dir(ctl)); err != nil {
		syscall.Mount("fusectl", fusectl, "fusectl", 0, "")
	}
	return os.WriteFile(ctl, []byte("1"), 0)
}
