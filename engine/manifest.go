package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble reads its MANIFEST (the list of the store's tables, a log of
// version edits) up to the first record that fails its checksum and takes
// that for the end, as it would a last edit torn by a crash. A flipped bit
// in an edit was so read as the end of the list: the store opened without
// the tables the later edits added, Pebble deleted those tables as
// obsolete, and the node served 404 for records it had acknowledged, its
// applied index unchanged. checkManifest reads the current MANIFEST first
// and refuses one whose damage is not a torn end: a whole chunk (one that
// ends inside the file) whose checksum does not match, or bytes after a
// zeroed header. A chunk that runs past the end of the file, or zeros to
// the end, is what a crash during the last append leaves; Pebble drops it.

const (
	manifestBlock  = 32 << 10 // pebble/record's block
	manifestHeader = 7        // checksum (4), length (2), chunk type (1)
)

var manifestCRC = crc32.MakeTable(crc32.Castagnoli)

// manifestChecksum is pebble/record's masked CRC-32C.
func manifestChecksum(b []byte) uint32 {
	c := crc32.Update(0, manifestCRC, b)
	return (c>>15 | c<<17) + 0xa282ead8
}

// checkManifest refuses dir's current MANIFEST when it is damaged other
// than at its end; it says nothing of a store it cannot read (Pebble does).
func checkManifest(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return nil
	}
	marker := ""
	for _, n := range names {
		if strings.HasPrefix(n, "marker.manifest.") {
			marker = max(marker, n) // fixed-width iteration numbers
		}
	}
	i := strings.Index(marker, "MANIFEST-")
	if i < 0 {
		return nil
	}
	path := fs.PathJoin(dir, marker[i:])
	f, err := fs.Open(path)
	if err != nil {
		return nil
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil
	}
	if off, why := manifestDamage(b); why != "" {
		return fmt.Errorf("engine: %s, the list of the store's tables, is damaged at byte %d (%s): opened so, the store would lose the tables listed after it, and Pebble would delete them. The store is damaged and this node cannot read its state. Nothing was changed. %s",
			path, off, why, damagedAdvice)
	}
	return nil
}

// manifestDamage returns where b, a MANIFEST, is damaged other than at its
// end, and how; "" when it is whole or only its end is torn.
func manifestDamage(b []byte) (int, string) {
	for p := 0; p < len(b); {
		if left := manifestBlock - p%manifestBlock; left < manifestHeader {
			p += left // the writer's zero padding
			continue
		}
		if len(b)-p < manifestHeader {
			return 0, "" // a header cut short: a torn end
		}
		h := b[p : p+manifestHeader]
		if bytes.Equal(h, make([]byte, manifestHeader)) {
			if bytes.Count(b[p:], []byte{0}) == len(b)-p {
				return 0, "" // zeros to the end: a torn end
			}
			return p, "a zeroed chunk header with data after it"
		}
		n := int(binary.LittleEndian.Uint16(h[4:6]))
		end := p + manifestHeader + n
		if end > len(b) {
			return 0, "" // a chunk cut short: a torn end
		}
		if end/manifestBlock > p/manifestBlock && end%manifestBlock != 0 {
			return p, "a chunk length that crosses its block"
		}
		if t := h[6]; t < 1 || t > 4 {
			return p, fmt.Sprintf("unknown chunk type %d", t)
		}
		if manifestChecksum(b[p+6:end]) != binary.LittleEndian.Uint32(h[0:4]) {
			return p, "a whole chunk whose checksum does not match"
		}
		p = end
	}
	return 0, ""
}
