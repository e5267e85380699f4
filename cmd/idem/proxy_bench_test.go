package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProxyLatency measures what `idem proxy` adds: the same POST sent to a
// no-op upstream directly and through the proxy (a fresh key per request:
// claim, forward, complete), and retries through the proxy (a replay: one
// claim answered from the store), at 1 and 64 clients, with a local
// one-node `idem serve`; and the same through a proxy that batches its
// store calls (--store-batch 64). It asserts nothing about speed; it prints a table.
//
//	IDEM_PROXY_BENCH=10s go test -run TestProxyLatency -v ./cmd/idem
func TestProxyLatency(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("IDEM_PROXY_BENCH"))
	if err != nil {
		t.Skip("set IDEM_PROXY_BENCH to a duration per run (e.g. 10s) to measure the proxy")
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "11")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer upstream.Close()
	node := startStore(t)
	px := startProxy(t, "--upstream", upstream.URL, "--store", node.http, "--log-level", "warn")
	pxb := startProxy(t, "--upstream", upstream.URL, "--store", node.http, "--log-level", "warn", "--store-batch", "64")

	t.Logf("%-28s %8s %10s %10s %10s %8s", "target", "clients", "req/s", "p50 ms", "p99 ms", "errors")
	for _, clients := range []int{1, 64} {
		for _, c := range []struct {
			name, url string
			replay    bool
		}{
			{"upstream directly", upstream.URL, false},
			{"proxy, fresh key", px.url, false},
			{"proxy, replay", px.url, true},
			{"proxy --store-batch 64, fresh", pxb.url, false},
			{"proxy --store-batch 64, replay", pxb.url, true},
		} {
			r := pxLoadRun(t, c.url+"/pay", clients, d, c.replay)
			t.Logf("%-28s %8d %10.0f %10.2f %10.2f %8d", c.name, clients, r.rate, r.p50, r.p99, r.errors)
		}
	}
}

type pxLoad struct {
	rate, p50, p99 float64
	errors         int
}

// pxLoadRun sends POSTs from clients goroutines for d after a 1 s warm-up.
// With replay each client repeats one key (after its first request every
// answer is a replay); otherwise every request has a fresh key.
func pxLoadRun(t *testing.T, url string, clients int, d time.Duration, replay bool) pxLoad {
	tr := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	warm := time.Now().Add(time.Second)
	end := warm.Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fixed := pxKey()
			var mine []time.Duration
			bad := 0
			for time.Now().Before(end) {
				key := fixed
				if !replay {
					key = pxKey()
				}
				req, err := http.NewRequest("POST", url, strings.NewReader(`{"amount":100}`))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", key)
				start := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				took := time.Since(start)
				if start.Before(warm) {
					continue
				}
				if err != nil || resp.StatusCode != http.StatusCreated {
					bad++
					continue
				}
				mine = append(mine, took)
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	if len(lat) == 0 {
		return pxLoad{errors: errs}
	}
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	return pxLoad{rate: float64(len(lat)) / d.Seconds(), p50: ms(0.50), p99: ms(0.99), errors: errs}
}

func pxKey() string {
	b := make([]byte, 12)
	rand.Read(b)
	return fmt.Sprintf("k-%s", hex.EncodeToString(b))
}
