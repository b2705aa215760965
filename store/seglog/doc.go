// Package seglog is an embedded store.Store built for the durable
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
// exactly as store/bolt: it passes store/storetest's suite, the same
// kill -9 test, and storetest.PowerLoss through hundreds of crash points
// on a file layer that drops what no fdatasync covered.
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
// length, CRC-32C, then its rows (stream, cursor, record with its own
// CRC-32C) and the producer position, so that it is all or nothing
// after a torn write. Concurrent calls share a commit (storekit.GroupCommit): their frames go
// in one write and one fdatasync; rows become visible to Read only after
// it, in cursor order. A commit that only records positions is not
// fdatasynced (store.LocalStore allows it); the next commit's fdatasync
// covers it.
//
// Open replays every segment: each frame must read back whole and each
// row be its stream's next cursor. What a crash leaves is cut off: at
// the tail of the last segment, the first frame that is not whole and
// what follows, when nothing after it was written once an fdatasync had
// covered it (each frame records how much of its segment was fdatasynced
// when it was written). Only unacknowledged commits are there: the cut
// is logged (WithLogger; by default to stderr, never to nothing) and
// counted (echopubsub.store.recovery_cut, cause "torn_tail";
// WithMeterProvider). A new segment starts once the active one reaches
// WithSegmentSize; the one it seals is fdatasynced first, and the new
// one's header and directory entry are fsynced before a frame goes to it.
//
// # Damage
//
// Anything else that does not read back is damage a crash cannot leave:
// a bad frame with a frame after it that was written once the bad one's
// bytes had been fdatasynced, any bad frame in a sealed segment, a frame
// whose checksum holds but whose rows do not fit. Open then fails with
// ErrDamaged, naming the file and the offset, and changes nothing: Open
// never guesses past corruption, nor drops acknowledged rows and hands
// their cursors out again. WithRepair(true) repairs it instead: the log
// is kept up to the damage; what follows (the rest of that segment, the
// segments after it) is moved to .cut files beside them; and, per
// stream, every cursor that may have been handed out past the damage is
// appended again: the row itself when a whole frame after the damage
// still holds it, else a gap row (Missed 1, a reason naming the file and
// the offset), which a reader is told as a *StreamGap. Where bytes read
// back as no frame at all, each stream not seen after them gets as many
// gap rows as those bytes could have held of its rows (Missed 0:
// unknown), so that no cursor is handed out for a second row. A stream
// whose every row was in those bytes is unknown to the repaired log (its
// name is lost with them). The repair is logged and counted
// (echopubsub.store.recovery_cut, cause "repair"). It survives a power
// loss: the repaired segment is written beside the damaged one and
// renamed over it once on disk, and the segments after it go last; a
// repair stopped part way is finished by the next Open with WithRepair.
//
// Damage that hits only the last commit's bytes cannot be told from a
// torn write: it is cut off as one. A frame written before frames
// recorded what was fdatasynced (frame version 1, snapshot version 2)
// after a bad frame counts as one written after it reached the disk.
//
// # Costs and limits
//
// The index holds 24 bytes per row in memory (segment, offset, length,
// payload length, append time), and Open reads every segment: memory and
// start-up time grow with what is kept.
//
// # Retention
//
// Store is a store.Trimmer (echopubsub.WithRetention): a trim
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
// the page cache when warm, and checks each row's CRC-32C (its record's,
// storekit format 3; a row of a version 1 frame, written before records
// had one, against its whole frame's): a row whose bytes changed on the
// disk is an error naming the file and the offset, never served. Two processes cannot open one directory
// (flock on its LOCK file, unix only). A failed fdatasync leaves what is
// on disk unknown: the store then refuses every append until reopened.
//
// Compared with store/bolt: one fdatasync per commit instead of two plus
// page writes (see docs/benchmarks.md for the measured figures); bbolt
// keeps no index in memory and opens in constant time: the better pick
// for a node that keeps many millions of rows and must start fast.
package seglog
