package main

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/idem-store/idem/bench"
)

// scopeKey is the store key of a scope: every part length-prefixed, so
// ("a","bc") and ("ab","c") differ, under a common prefix.
func scopeKey(s bench.Scope) string {
	var b strings.Builder
	b.Grow(16 + len(s.Principal) + len(s.Endpoint) + len(s.Key))
	b.WriteString("idem/")
	for _, p := range []string{s.Principal, s.Endpoint, s.Key} {
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// netError classifies a client error: a network failure or a timeout
// leaves the outcome unknown.
func netError(err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "EOF") {
		return bench.Indeterminately("transport", err)
	}
	return nil
}

func newIdemDriver(_ context.Context, o driverOpts) (bench.Driver, error) {
	addrs := splitList(o.target)
	if len(addrs) == 0 {
		return nil, errors.New("--target names no node")
	}
	if o.batch > 0 {
		return bench.NewBatchDriver(addrs, "", o.batch, nil)
	}
	return bench.NewHTTPDriver(addrs, ""), nil
}
