package raftfsm

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkStoreLogs appends raft-sized batches (entries of 256 bytes, a
// claim command's size) to raft-wal (the raft log store) and to raft-boltdb, the log
// store it replaced, compacting as raft does (about 10k trailing entries).
// Each op is one StoreLogs call, so one fsync for raft-wal and two
// fdatasyncs for bolt:
//
//	go test -run '^$' -bench StoreLogs -benchtime 2s ./raftfsm
func BenchmarkStoreLogs(b *testing.B) {
	for _, batch := range []int{1, 16, 64, 256} {
		for _, kind := range []string{"bolt", "wal"} {
			b.Run(fmt.Sprintf("%s/batch=%d", kind, batch), func(b *testing.B) {
				dir := b.TempDir()
				var s raft.LogStore
				switch kind {
				case "bolt":
					bs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
					if err != nil {
						b.Fatal(err)
					}
					defer bs.Close()
					s = bs
				case "wal":
					ws, err := openWAL(dir, nil)
					if err != nil {
						b.Fatal(err)
					}
					defer ws.Close()
					s = ws
				}
				benchStoreLogs(b, s, batch, 256)
			})
		}
	}
}

func benchStoreLogs(b *testing.B, s raft.LogStore, batch, size int) {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	next := uint64(1)
	logs := make([]*raft.Log, batch)
	b.SetBytes(int64(batch * size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range logs {
			logs[j] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Now()}
			next++
		}
		if err := s.StoreLogs(logs); err != nil {
			b.Fatal(err)
		}
		if next > 20_000 && i%64 == 0 {
			first, err := s.FirstIndex()
			if err != nil {
				b.Fatal(err)
			}
			if err := s.DeleteRange(first, next-10_240); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
}
