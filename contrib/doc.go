// Package contrib holds no Go code: it is where idem's operator files live
// (Prometheus alert rules in prometheus/, a Grafana dashboard in grafana/),
// and its test keeps them honest. The test starts a real node, sends it
// claims, replays, a conflict and a fingerprint mismatch, scrapes /metrics
// and fails when a rule or a panel names a metric or a label value the
// server does not export, so a renamed metric cannot leave a silent alert
// behind. See docs/OPERATIONS.md.
package contrib
