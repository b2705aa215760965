package bolt

import (
	"bytes"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/echopubsub/echopubsub/store/storekit"
)

// upgradeChunk is how many rows one upgrade transaction rewrites: a
// bounded transaction, however large the file.
const upgradeChunk = 10_000

// upgrade rewrites every row of a file written before rows carried a
// checksum (no "format" in bucket "meta") as format 3, keeping its key
// (its cursor) and each stream's sequence, then marks the file. A row
// that does not decode is an error naming its stream and cursor: the
// upgrade checksums only what reads back. A crash part way leaves the
// file unmarked, and the next Open goes on (rows already format 3 are
// skipped). Every later Read checks each row's checksum.
func upgrade(db *bbolt.DB) error {
	var done bool
	var from struct{ stream, key []byte }
	for !done {
		err := db.Update(func(tx *bbolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			if meta.Get(keyFormat) != nil {
				done = true
				return nil
			}
			n, err := upgradeChunkTx(tx, &from.stream, &from.key)
			if err != nil {
				return err
			}
			if n < upgradeChunk {
				done = true
				return meta.Put(keyFormat, []byte{boltFormat})
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// upgradeChunkTx rewrites up to upgradeChunk rows from (stream, key) on
// (both nil: the first), and moves them past the last row it read.
func upgradeChunkTx(tx *bbolt.Tx, stream, key *[]byte) (int, error) {
	root := tx.Bucket(bucketStreams)
	type put struct{ k, v []byte }
	var puts []put
	var names [][]byte
	if err := root.ForEachBucket(func(name []byte) error {
		if *stream == nil || bytes.Compare(name, *stream) >= 0 {
			names = append(names, append([]byte(nil), name...))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		b := root.Bucket(name)
		c := b.Cursor()
		k, v := c.First()
		if bytes.Equal(name, *stream) && *key != nil {
			k, v = c.Seek(*key)
		}
		puts = puts[:0]
		for ; k != nil && n < upgradeChunk; k, v = c.Next() {
			n++
			*stream, *key = name, append([]byte(nil), k...)
			if len(v) > 0 && v[0] == boltFormat {
				continue
			}
			r, err := storekit.DecodeRecord(v, false)
			if err != nil {
				return n, fmt.Errorf("stream %q key %x: %w", name, k, err)
			}
			puts = append(puts, put{append([]byte(nil), k...), storekit.AppendRecord(nil, &r)})
		}
		for _, p := range puts { // not through the cursor: a Put can move it
			if err := b.Put(p.k, p.v); err != nil {
				return n, err
			}
		}
		if n >= upgradeChunk {
			*key = append(*key, 0) // the next chunk starts after it
			return n, nil
		}
	}
	return n, nil
}
