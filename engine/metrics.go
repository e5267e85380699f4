package engine

import (
	"bytes"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"

	"github.com/idem-store/idem/partition"
)

// Stats describe what the store holds, for metrics. Records and Bytes count
// stored records, including expired ones whose bucket is not dropped yet.
type Stats struct {
	Buckets                 int
	Records                 int64
	Bytes                   int64
	OldestCreatedMs         int64 // 0 when empty
	InProgress              int64
	OldestInProgressCreated int64 // 0 when none
	// LeaseExpired counts in-progress records whose lease ran out by the
	// applied cluster time: attempts whose caller neither completed nor
	// released them (it crashed, or lost its answer) and no retry took over.
	LeaseExpired int64
	DiskBytes    uint64
}

// Stats walks bucket by bucket (seeks, not a scan of records). In-progress
// claims are counted from the lease index, which is small.
func (d *DB) Stats() (Stats, error) {
	var s Stats
	now := d.Meta().NowMs
	err := d.eachBucket(func(it *pebble.Iterator, b partition.Bucket) bool {
		s.Buckets++
		sk := statsKey(b)
		if it.SeekGE(sk) && bytes.Equal(it.Key(), sk) {
			if v, err := it.ValueAndErr(); err == nil {
				bs := decodeStats(v)
				s.Records += bs.Records
				s.Bytes += bs.Bytes
				if bs.Records > 0 && bs.MinCreated != 0 && (s.OldestCreatedMs == 0 || bs.MinCreated < s.OldestCreatedMs) {
					s.OldestCreatedMs = bs.MinCreated
				}
			}
		}
		lp := bucketKey(nil, b, kindLease)
		for ok := it.SeekGE(lp); ok && bytes.HasPrefix(it.Key(), lp); ok = it.Next() {
			s.InProgress++
			if k := it.Key()[len(lp):]; len(k) >= 8 && int64(binary.BigEndian.Uint64(k)) <= now {
				s.LeaseExpired++
			}
			if v, err := it.ValueAndErr(); err == nil && len(v) == 8 {
				c := int64(binary.BigEndian.Uint64(v))
				if s.OldestInProgressCreated == 0 || c < s.OldestInProgressCreated {
					s.OldestInProgressCreated = c
				}
			}
		}
		return true
	})
	d.mu.RLock()
	if !d.closed {
		s.DiskBytes = d.pdb.Metrics().DiskSpaceUsage()
	}
	d.mu.RUnlock()
	return s, err
}
