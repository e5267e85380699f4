package e2emiddleware_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
	"github.com/idem-store/idem/middleware"
)

// BenchmarkAddedLatency measures what the middleware adds to a no-op
// handler against a local one-node store: every request carries a new key,
// so each is a claim and a complete (two raft commits). direct is the same
// handler without the middleware; replay sends one key again and again (a
// retry: one claim answered from the leader's state, no commit). p50 and
// p99 are per request, in µs.
//
//	go test ./middleware -run '^$' -bench AddedLatency -benchtime 2000x
func BenchmarkAddedLatency(b *testing.B) {
	node := idemtest.Start(b, idemtest.Options{})
	store, err := client.New(node.URL)
	if err != nil {
		b.Fatal(err)
	}
	idem, err := middleware.New(middleware.Options{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	noop := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	wrapped := httptest.NewServer(idem(noop))
	fronts := map[string]*httptest.Server{"direct": httptest.NewServer(noop), "middleware": wrapped, "replay": wrapped}
	for _, s := range fronts {
		defer s.Close()
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	var seq atomic.Int64
	for _, clients := range []int{1, 64} {
		for _, name := range []string{"direct", "middleware", "replay"} {
			url := fronts[name].URL + "/payments"
			b.Run(fmt.Sprintf("%s/clients=%d", name, clients), func(b *testing.B) {
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":100}`))
							req.Header.Set("Content-Type", "application/json")
							key := "bench-" + strconv.FormatInt(seq.Add(1), 10)
							if name == "replay" {
								key = "bench-replay"
							}
							req.Header.Set("Idempotency-Key", key)
							start := time.Now()
							resp, err := hc.Do(req)
							if err != nil {
								b.Error(err)
								return
							}
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							lat[i] = time.Since(start)
							if resp.StatusCode != http.StatusCreated {
								b.Errorf("status %d", resp.StatusCode)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}
