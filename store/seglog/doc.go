// Package seglog is an embedded echopubsub.Store built for the durable
// append: an append-only log of segment files in one directory per node,
// one fdatasync per group commit, and an in-memory index. It is the
// embedded store this repository recommends and its chat demo uses;
// store/bolt (its own module) is the alternative.
//
//	store, err := seglog.Open("/var/lib/app/streams")
//	ps, err := echopubsub.Start(system, cfg, echopubsub.WithStore(store),
//		echopubsub.WithDurableTopics("room:*"))
//	// after ps.Stop: store.Close()
//
// A node-local store (Shared false) with gap rows and producer positions,
// exactly as store/bolt: it passes store/storetest's suite and the same
// kill -9 test.
//
// # Why
//
// A bbolt commit writes the changed B+tree pages and the meta page and
// fsyncs twice (the data, then the meta page that makes it current): a
// lone durable publisher waits for both. Here a commit is one write(2) at
// the end of the active segment and one fdatasync(2): the least a durable
// append can cost, which is what the durable benchmarks compare with a
// probe of the disk (storetest.BenchLocalDurable; docs/benchmarks.md,
// "Durable streams").
//
// # Format and recovery
//
// Every Append, AppendAt or MarkGap call is one frame (see frame.go):
// length, CRC-32C, then its rows (stream, cursor, record) and the producer
// position, so that it is all or nothing after a torn write. Concurrent
// calls share a commit (internal/storekit.GroupCommit): their frames go
// in one write and one fdatasync; rows become visible to Read only after
// it, in cursor order. A commit that only records positions is not
// fdatasynced (core.LocalStore allows it); the next commit's fdatasync
// covers it.
//
// Open replays every segment: each frame must read back whole and each
// row be its stream's next cursor. At the tail of the last segment, the
// first frame that is not whole and what follows is cut off (a commit
// the crash cut short: never acknowledged). Anything else is an error
// naming the file and the offset: Open never guesses past corruption.
// A new segment starts once the active one reaches WithSegmentSize; its
// header and directory entry are fsynced before a frame goes to it.
//
// # Costs and limits
//
// The index holds 24 bytes per row in memory (segment, offset, length,
// payload length, append time), and Open reads every segment: memory and
// start-up time grow with what is kept.
//
// # Retention
//
// Store is an echopubsub.Trimmer (echopubsub.WithRetention): a trim
// decides from the index alone (no record is read), drops the rows from
// the index at once, and frees the disk a segment at a time: it writes a
// snapshot frame (each trimmed stream's first kept cursor and end, every
// producer position) and fdatasyncs it, then deletes the oldest segments
// that hold no kept row. A segment with one row still kept is kept whole,
// and so are those after it: size segments (WithSegmentSize) well below
// what the retention keeps. A crash between the snapshot and the
// deletions leaves segments that Open deletes (only those before the
// last snapshot's segment: a segment after it may hold the only frame of
// a producer position; a trim that cuts no row still writes a snapshot
// to free the oldest segments when they hold no kept row). Open checks
// that every stream it finds holds each row from the first cursor its
// last snapshot keeps: a segment deleted by hand is an error when a
// stream goes on after it, but a stream (or a position) whose every
// frame was in it is simply not there.
// Appends wait for a trim as for one commit; it costs them the time to
// walk the index of each stream (and, for MaxBytes, its kept rows), plus
// one fdatasync.
//
// # Reads
//
// Read
// fetches rows with pread (adjacent rows of a stream in one call), from
// the page cache when warm. Two processes cannot open one directory
// (flock on its LOCK file, unix only). A failed fdatasync leaves what is
// on disk unknown: the store then refuses every append until reopened.
//
// Compared with store/bolt: one fdatasync per commit instead of two plus
// page writes (see docs/benchmarks.md for the measured figures); bbolt
// keeps no index in memory and opens in constant time: the better pick
// for a node that keeps many millions of rows and must start fast.
package seglog
