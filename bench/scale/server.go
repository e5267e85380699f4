package scale

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is one `idem serve` child process.
type server struct {
	cmd  *exec.Cmd
	addr string // HTTP host:port
	log  *os.File
	done chan error
}

// freePort returns a loopback port nothing listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startServer starts binary serve on dataDir and waits until /readyz
// answers 200.
func startServer(ctx context.Context, c *Config, dataDir, logPath string) (*server, error) {
	hp, err := freePort()
	if err != nil {
		return nil, err
	}
	rp, err := freePort()
	if err != nil {
		return nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", hp)
	args := []string{"serve", "--data-dir", dataDir, "--http-addr", addr,
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", rp),
		"--retention", c.Retention.String(), "--bucket-width", c.BucketWidth.String(),
		"--cache-bytes", strconv.FormatInt(c.CacheBytes, 10)}
	cmd := exec.Command(c.Binary, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", c.Binary, err)
	}
	s := &server{cmd: cmd, addr: addr, log: lf, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	deadline := time.Now().Add(c.ReadyTimeout)
	for {
		if st, _, err := httpGet(ctx, "http://"+addr+"/readyz"); err == nil && st == http.StatusOK {
			return s, nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			lf.Close()
			return nil, fmt.Errorf("idem serve exited before it was ready (%v); log: %s", err, tail(logPath))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("idem serve not ready after %s; log: %s", c.ReadyTimeout, tail(logPath))
		}
	}
}

// cleanEnv drops IDEM_* variables, which would change the server's flags.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			out = append(out, kv)
		}
	}
	return out
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// stop sends SIGTERM and waits (SIGKILL after 60 s). It returns the exit
// error, nil for a clean exit.
func (s *server) stop() error {
	defer s.log.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		return err
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return errors.New("idem serve did not stop within 60s of SIGTERM; killed")
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func httpGet(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// metrics reads the unlabelled samples of /metrics (name -> value).
func (s *server) metrics(ctx context.Context) (map[string]float64, error) {
	st, b, err := httpGet(ctx, "http://"+s.addr+"/metrics")
	if err != nil {
		return nil, err
	}
	if st != http.StatusOK {
		return nil, fmt.Errorf("/metrics: status %d", st)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// procMem reads VmRSS and VmHWM of pid, in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch name {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			hwm = n << 10
		}
	}
	return rss, hwm, nil
}

// diskUsage is the space the files under dir take on disk (allocated
// blocks, so sparse and preallocated files count as the disk sees them).
func diskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking (Pebble deletes obsolete files)
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	return total, err
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
