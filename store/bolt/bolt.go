// Package bolt is an embedded store.Store in one bbolt file per node,
// fsynced per commit, concurrent appends group-committed; it opens in
// constant time (the embedded default, store/seglog, reads its segments at
// open and keeps an index in memory).
// A node-local store: each node appends what it receives and marks what
// it missed with gap rows (see "Durable streams" in package echopubsub).
//
//	store, err := bolt.Open("/var/lib/app/node.db")
//	ps, err := echopubsub.Start(system, cfg, echopubsub.WithStore(store),
//		echopubsub.WithDurableTopics("room:*"))
//	// after ps.Stop: store.Close()
package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// Store is the embedded store.Store: one bbolt file per node (bbolt holds an
// exclusive lock on it: two processes cannot open the same file). Each
// commit is fsynced before Append returns, so an appended row survives kill
// -9 and power loss. Appends from concurrent callers are committed together
// (group commit: one transaction and one fsync for everything queued while
// the previous commit ran), with no added delay for a lone caller.
//
// Layout: bucket "streams" holds one bucket per stream, whose keys are the
// 8-byte big-endian cursors (bbolt's bucket sequence, which a rolled-back
// transaction does not advance) and whose values are encoded records,
// each with a CRC-32C that Read checks: a row damaged on the disk is an
// error naming the file, the stream and the cursor, never served.
// Bucket "producers" holds the producer positions (LocalStore), apart from
// the rows: retention (Trim) deletes rows only, and keeps each stream's
// bucket, whose sequence is the stream's end, so that no cursor is handed
// out twice and MarkGap still finds every stream.
type Store struct {
	db      *bbolt.DB
	commits *storekit.GroupCommit[*boltAppend]
}

type boltAppend struct {
	storekit.LocalAppend
	trim     *trimChunk  // Trim: one chunk of rows deleted
	consumer *consumerOp // CommitConsumer, DeleteConsumer
}

// synced reports whether a's transaction must be fsynced before it is
// acknowledged: rows are, and deletions (a trim); a position alone is not
// (see LocalStore).
func (a *boltAppend) synced() bool { return a.Synced() || a.trim != nil || a.consumer != nil }

var (
	bucketStreams   = []byte("streams")
	bucketMeta      = []byte("meta")
	bucketProducers = []byte("producers")
	bucketConsumers = []byte("consumers")
)

// The record encoding (storekit.AppendRecord) is bolt's format 3: format
// 2 (format 1 and the append time) with a CRC-32C that Read checks, so
// that a damaged row is an error naming its stream and cursor, never
// served. Key "format" of bucket "meta" says that every row of the file
// is format 3; a file without it (written before checksums) is rewritten
// at Open, a chunk of rows per transaction, each row checked to decode,
// then marked (see upgrade).
const (
	boltFormat   = storekit.RecordFormat
	boltFormatV2 = storekit.RecordFormatV2
	boltFormatV1 = storekit.RecordFormatV1
)

var keyFormat = []byte("format")

// lockWait is how long Open waits for another holder's lock on the file
// (a process that is still stopping lets go within it).
var lockWait = 5 * time.Second

// Open opens (or creates) the embedded store at path. It waits at
// most 5 s for another process's lock on the file.
func Open(path string) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("echopubsub: bolt store path must not be empty")
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: lockWait})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("echopubsub: open bolt store %q: the file is locked (another process, or another Open in this one, has it open; waited %v): %w",
			path, lockWait, err)
	}
	if err != nil {
		return nil, fmt.Errorf("echopubsub: open bolt store %q: %w", path, err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketStreams); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketProducers); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketConsumers); err != nil {
			return err
		}
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil || meta.Get(keyFormat) != nil {
			return err
		}
		if k, _ := tx.Bucket(bucketStreams).Cursor().First(); k == nil { // a new file: every row will be format 3
			return meta.Put(keyFormat, []byte{boltFormat})
		}
		return nil
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("echopubsub: init bolt store %q: %w", path, err)
	}
	if err := upgrade(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("echopubsub: upgrade bolt store %q to checksummed rows: %w", path, err)
	}
	s := &Store{db: db}
	s.commits = storekit.NewGroupCommit(s.commit)
	return s, nil
}

// Shared is false: the file belongs to one node.
func (s *Store) Shared() bool { return false }

// Append implements store.Store. ctx bounds the wait for the commit; a commit
// that ctx abandoned may still land (the rows are then stored, and Append
// returned ctx's error).
func (s *Store) Append(ctx context.Context, recs []store.Record) error {
	if len(recs) == 0 {
		return nil
	}
	return s.submit(ctx, recs, nil, nil)
}

// AppendAt implements LocalStore.
func (s *Store) AppendAt(ctx context.Context, recs []store.Record, pos store.ProducerPosition) error {
	return s.submit(ctx, recs, nil, &pos)
}

// MarkGap implements LocalStore.
func (s *Store) MarkGap(ctx context.Context, gap store.Record, pos store.ProducerPosition) error {
	gap.Kind, gap.Stream = store.RecordGap, "-"
	return s.submit(ctx, nil, &gap, &pos)
}

// Position implements LocalStore.
func (s *Store) Position(ctx context.Context, node string, group uint32) (store.ProducerPosition, bool, error) {
	p := store.ProducerPosition{Node: node, Group: group}
	found := false
	err := s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketProducers).Get(positionKey(node, group))
		if v == nil {
			return nil
		}
		if len(v) != 17 {
			return fmt.Errorf("producer position of %s group %d: %d bytes", node, group, len(v))
		}
		p.Incarnation, p.Next, p.Retired = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), v[16] == 1
		found = true
		return nil
	})
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return p, false, store.ErrStoreClosed
	}
	return p, found, err
}

func positionKey(node string, group uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte(node+"/"), group)
}

func (s *Store) submit(ctx context.Context, recs []store.Record, gap *store.Record, pos *store.ProducerPosition) error {
	return storekit.SubmitLocal(ctx, s.commits, &boltAppend{}, "bolt append", recs, gap, pos)
}

// commit writes batch in one transaction (storekit.GroupCommit retries each append
// alone when it fails).
func (s *Store) commit(batch []*boltAppend) error {
	sync := false
	for _, a := range batch {
		sync = sync || a.synced()
	}
	s.db.NoSync = !sync // only this goroutine writes: read by this Update's commit alone
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for _, a := range batch {
			if err := appendTx(tx, a.Recs); err != nil {
				return err
			}
			if a.Gap != nil {
				if err := gapTx(tx, a.Gap); err != nil {
					return err
				}
			}
			if a.trim != nil {
				if err := a.trim.run(tx); err != nil {
					return err
				}
			}
			if a.consumer != nil {
				if err := a.consumer.run(tx); err != nil {
					return err
				}
			}
			if a.Pos != nil {
				v := binary.BigEndian.AppendUint64(nil, a.Pos.Incarnation)
				v = binary.BigEndian.AppendUint64(v, a.Pos.Next)
				r := byte(0)
				if a.Pos.Retired {
					r = 1
				}
				if err := tx.Bucket(bucketProducers).Put(positionKey(a.Pos.Node, a.Pos.Group), append(v, r)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return err
}

// gapTx appends gap to every stream.
func gapTx(tx *bbolt.Tx, gap *store.Record) error {
	root := tx.Bucket(bucketStreams)
	var names [][]byte
	if err := root.ForEachBucket(func(k []byte) error {
		names = append(names, append([]byte(nil), k...))
		return nil
	}); err != nil {
		return err
	}
	for _, n := range names {
		g := *gap
		g.Stream = string(n)
		if err := appendTx(tx, []store.Record{g}); err != nil {
			return err
		}
	}
	return nil
}

func appendTx(tx *bbolt.Tx, recs []store.Record) error {
	root := tx.Bucket(bucketStreams)
	for i := range recs {
		r := &recs[i]
		b, err := root.CreateBucketIfNotExists([]byte(r.Stream))
		if err != nil {
			return fmt.Errorf("stream %q: %w", r.Stream, err)
		}
		c, err := b.NextSequence()
		if err != nil {
			return err
		}
		if err := b.Put(cursorKey(c), storekit.AppendRecord(make([]byte, 0, storekit.RecordSize(r)), r)); err != nil {
			return err
		}
		r.Cursor = c
	}
	return nil
}

// Read implements store.Store.
func (s *Store) Read(ctx context.Context, stream string, from uint64, limit int) ([]store.Record, uint64, error) {
	from, err := storekit.ReadFrom(ctx, from, limit)
	if err != nil {
		return nil, 0, err
	}
	var out []store.Record
	next := from
	err = s.db.View(func(tx *bbolt.Tx) error { // one snapshot: every row up to end is there or was trimmed
		b := tx.Bucket(bucketStreams).Bucket([]byte(stream))
		var end uint64 // last cursor handed out
		if b != nil {
			end = b.Sequence()
		}
		if err := storekit.BeyondEnd(stream, from, end); err != nil {
			return err
		}
		if b == nil {
			return nil
		}
		// Rows below the first kept were trimmed: the page starts at the
		// first kept row, and with none from from on, next is end + 1.
		next = end + 1
		c := b.Cursor()
		for k, v := c.Seek(cursorKey(from)); k != nil && len(out) < limit; k, v = c.Next() {
			r, err := storekit.DecodeRecord(v, true)
			if err != nil {
				return fmt.Errorf("%s: stream %q cursor %d (key %x): %w", s.db.Path(), stream, binary.BigEndian.Uint64(k), k, err)
			}
			r.Stream, r.Cursor = stream, binary.BigEndian.Uint64(k)
			out = append(out, r)
			next = r.Cursor + 1
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, berrors.ErrDatabaseNotOpen) {
			return nil, 0, store.ErrStoreClosed
		}
		return nil, 0, fmt.Errorf("echopubsub: bolt read: %w", err)
	}
	return out, next, nil
}

// Close waits for queued appends to commit, then closes the file.
func (s *Store) Close() error {
	s.commits.Close()
	return s.db.Close()
}

func cursorKey(c uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], c)
	return k[:]
}

var (
	_ store.LocalStore = (*Store)(nil)
	_ store.Trimmer    = (*Store)(nil)
)
