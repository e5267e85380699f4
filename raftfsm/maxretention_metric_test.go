package raftfsm

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// idem_max_retention_seconds was documented (its help, OPERATIONS.md) as
// the longest retention any stored record has, which the IdemExpiryStalled
// and IdemRecordsAboveRateTimesRetention alerts compare with. It is the
// longest the cluster ever gave or was set to: set to 5m and back to 2m
// with no claim between, it reads 300 with no record of 5m stored, and
// goes on doing so. The help says so now.
func TestMaxRetentionMetricNeverGoesDown(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := mustNode(t, func(c *Config) {
		c.Registry = reg
		c.TickInterval, c.SweepInterval = time.Hour, time.Hour
	})
	require.NoError(t, n.SetRetention(5*time.Minute))
	require.NoError(t, n.SetRetention(2*time.Minute))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	help := ""
	for _, mf := range mfs {
		switch mf.GetName() {
		case "idem_max_retention_seconds", "idem_retention_seconds", "idem_records":
			got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
			if mf.GetName() == "idem_max_retention_seconds" {
				help = mf.GetHelp()
			}
		}
	}
	require.Equal(t, map[string]float64{"idem_max_retention_seconds": 300, "idem_retention_seconds": 120, "idem_records": 0}, got)
	require.NotContains(t, help, "any stored record", "no record of 5m was ever stored")
	require.Contains(t, help, "never goes down")
}
