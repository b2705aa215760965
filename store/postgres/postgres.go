// Package postgres is the shared store.Store: PostgreSQL through pgx,
// for clusters whose nodes should replay the same streams (a session on any
// node, any cursor meaning the same row everywhere). It is its own module,
// so that users of the embedded store do not pull pgx.
//
//	store, err := postgres.New(ctx, "postgres://user@db:5432/app")
//	ps, err := echopubsub.Start(system, cfg, echopubsub.WithStore(store),
//		echopubsub.WithDurableTopics("room:*"))
//
// The publishing node appends each durable broadcast once, before its
// Broadcast returns; other nodes do not write. New creates the schema (two
// tables, named with the prefix, default "echopubsub_") when it is missing.
//
// Cursors: each stream has a row in <prefix>streams holding its last
// cursor. An append takes that row's lock (INSERT ... ON CONFLICT DO
// UPDATE ... RETURNING), so the appends of one stream commit in cursor
// order, and a reader can never see a row before every row below it: a
// replay cannot step over a row that commits later. A rolled-back append
// gives its cursors back (the counter update rolls back with it), so the
// cursors have no hole. Appends to one stream are serialised by that lock;
// appends to different streams run in parallel.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// Store is the PostgreSQL Store. It is safe for concurrent use.
type Store struct {
	pool      *pgxpool.Pool
	owned     bool
	closed    atomic.Bool
	commits   *storekit.GroupCommit[*pending]
	streams   string // quoted table names
	records   string
	consumers string
}

// Option configures New.
type Option func(*options)

type options struct{ prefix string }

// WithTablePrefix names the tables <prefix>streams, <prefix>records and
// <prefix>consumers.
// Letters, digits and '_', starting with a letter or '_'. Defaults to
// "echopubsub_".
func WithTablePrefix(p string) Option { return func(o *options) { o.prefix = p } }

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// New connects to dsn (a pgx connection string or URL) and creates the
// schema if it is missing. Close closes the pool.
func New(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("echopubsub postgres: dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("echopubsub postgres: connect: %w", err)
	}
	s, err := NewWithPool(ctx, pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// NewWithPool uses the caller's pool (Close does not close it) and creates
// the schema if it is missing.
func NewWithPool(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	o := options{prefix: "echopubsub_"}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("echopubsub postgres: option %d is nil", i)
		}
		opt(&o)
	}
	if !identRE.MatchString(o.prefix) {
		return nil, fmt.Errorf("echopubsub postgres: WithTablePrefix %q: letters, digits and '_', not starting with a digit, at most 41", o.prefix)
	}
	s := &Store{pool: pool,
		streams:   pgx.Identifier{o.prefix + "streams"}.Sanitize(),
		records:   pgx.Identifier{o.prefix + "records"}.Sanitize(),
		consumers: pgx.Identifier{o.prefix + "consumers"}.Sanitize()}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	s.commits = storekit.NewGroupCommit(s.commitBatch)
	return s, nil
}

// schemaLock is the advisory lock key under which nodes starting together
// create the schema one at a time (CREATE TABLE IF NOT EXISTS alone races).
const schemaLock = 0x6563686f7073 // "echops"

func (s *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
			return fmt.Errorf("echopubsub postgres: schema lock: %w", err)
		}
		for _, q := range []string{
			`CREATE TABLE IF NOT EXISTS ` + s.streams + ` (
				stream text PRIMARY KEY,
				last_cursor bigint NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS ` + s.records + ` (
				stream text NOT NULL,
				cursor bigint NOT NULL,
				kind smallint NOT NULL,
				origin text NOT NULL,
				payload_type text NOT NULL,
				payload bytea NOT NULL,
				missed bigint NOT NULL,
				reason text NOT NULL,
				appended_at timestamptz,
				PRIMARY KEY (stream, cursor))`,
			// Tables created before rows carried their append time: those
			// rows keep NULL, read as the zero Time (see Trim).
			`ALTER TABLE ` + s.records + ` ADD COLUMN IF NOT EXISTS appended_at timestamptz`,
			// Named consumers (consumers.go).
			`CREATE TABLE IF NOT EXISTS ` + s.consumers + ` (
				stream text NOT NULL,
				name text NOT NULL,
				cursor bigint NOT NULL,
				committed_at timestamptz NOT NULL,
				PRIMARY KEY (stream, name))`,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("echopubsub postgres: create schema: %w", err)
			}
		}
		return nil
	})
}

// Shared is true: every node appends to and reads the same streams.
func (s *Store) Shared() bool { return true }

// Append implements store.Store. Appends from concurrent callers are
// committed together (group commit: one transaction for everything queued
// while the previous one ran, with no added delay for a lone caller), in
// one goroutine of the store. ctx bounds the wait: a commit that ctx
// abandoned may still land.
func (s *Store) Append(ctx context.Context, recs []store.Record) error {
	if len(recs) == 0 {
		return nil
	}
	for i := range recs {
		if err := storekit.ValidateRecord(&recs[i]); err != nil {
			return err
		}
	}
	storekit.Stamp(recs)
	a := &pending{recs: append([]store.Record(nil), recs...)}
	if err := s.commits.Submit(ctx, a); err != nil {
		if errors.Is(err, store.ErrStoreClosed) {
			return err
		}
		return fmt.Errorf("echopubsub postgres: append: %w", err)
	}
	for i := range recs {
		recs[i].Cursor = a.recs[i].Cursor
	}
	return nil
}

// pending is one queued Append (its own copy of the records).
type pending struct {
	recs []store.Record
}

// commitTimeout bounds one group commit.
const commitTimeout = 30 * time.Second

// commitBatch commits batch in one transaction (GroupCommit retries each
// append alone when it fails).
func (s *Store) commitBatch(batch []*pending) error {
	var all []*store.Record
	for _, a := range batch {
		for i := range a.recs {
			all = append(all, &a.recs[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	return s.commit(ctx, all)
}

// commit appends recs in one transaction and sets their cursors. Streams
// are locked in name order (no deadlock between appends to several
// streams, from this node or another).
func (s *Store) commit(ctx context.Context, recs []*store.Record) error {
	byStream := map[string][]*store.Record{}
	for _, r := range recs {
		byStream[r.Stream] = append(byStream[r.Stream], r)
	}
	names := make([]string, 0, len(byStream))
	for n := range byStream {
		names = append(names, n)
	}
	sort.Strings(names)
	cursors := make(map[*store.Record]uint64, len(recs))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows := make([][]any, 0, len(recs))
		for _, n := range names {
			rs := byStream[n]
			var last int64
			if err := tx.QueryRow(ctx, `INSERT INTO `+s.streams+` AS s (stream, last_cursor) VALUES ($1, $2)
				ON CONFLICT (stream) DO UPDATE SET last_cursor = s.last_cursor + EXCLUDED.last_cursor
				RETURNING last_cursor`, n, int64(len(rs))).Scan(&last); err != nil {
				return fmt.Errorf("stream %q: %w", n, err)
			}
			c := uint64(last) - uint64(len(rs)) + 1
			for _, r := range rs {
				cursors[r] = c
				payload := r.Payload
				if payload == nil {
					payload = []byte{}
				}
				rows = append(rows, []any{r.Stream, int64(c), int16(r.Kind), r.Origin, r.PayloadType, payload, int64(r.Missed), r.Reason, r.Time})
				c++
			}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{unquote(s.records)},
			[]string{"stream", "cursor", "kind", "origin", "payload_type", "payload", "missed", "reason", "appended_at"}, pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		if isClosed(err) {
			return fmt.Errorf("echopubsub postgres: append: %w: %w", store.ErrStoreClosed, err)
		}
		return fmt.Errorf("echopubsub postgres: append: %w", err)
	}
	for r, c := range cursors {
		r.Cursor = c
	}
	return nil
}

// Read implements store.Store.
func (s *Store) Read(ctx context.Context, stream string, from uint64, limit int) ([]store.Record, uint64, error) {
	if limit <= 0 {
		return nil, 0, fmt.Errorf("%w: Read limit %d", store.ErrBadLimit, limit)
	}
	if s.closed.Load() {
		return nil, 0, store.ErrStoreClosed
	}
	if from == 0 {
		from = 1
	}
	rows, err := s.pool.Query(ctx, `SELECT cursor, kind, origin, payload_type, payload, missed, reason, appended_at FROM `+s.records+`
		WHERE stream = $1 AND cursor >= $2 ORDER BY cursor LIMIT $3`, stream, int64(from), limit)
	if err != nil {
		return nil, 0, s.readErr(err)
	}
	var out []store.Record
	next := from
	for rows.Next() {
		var (
			c, missed int64
			kind      int16
			at        *time.Time
			r         = store.Record{Stream: stream}
		)
		if err := rows.Scan(&c, &kind, &r.Origin, &r.PayloadType, &r.Payload, &missed, &r.Reason, &at); err != nil {
			rows.Close()
			return nil, 0, s.readErr(err)
		}
		r.Cursor, r.Kind, r.Missed = uint64(c), store.RecordKind(kind), uint64(missed)
		if at != nil {
			r.Time = at.UTC()
		}
		out = append(out, r)
		next = r.Cursor + 1
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.readErr(err)
	}
	if len(out) == 0 {
		return s.readEnd(ctx, stream, from)
	}
	return out, next, nil
}

// readEnd is Read's answer when no row at or after from was seen: the end
// and whether a row from from on exists now, in one statement (one
// snapshot, in which every row up to last_cursor is committed: an append
// raises the counter and inserts its rows in one transaction). No row up
// to the end: each was trimmed, next is end + 1. A row committed since the
// first query: no row, next from (the caller reads again).
func (s *Store) readEnd(ctx context.Context, stream string, from uint64) ([]store.Record, uint64, error) {
	var (
		last  int64
		newer bool
	)
	err := s.pool.QueryRow(ctx, `SELECT last_cursor, EXISTS (SELECT 1 FROM `+s.records+` WHERE stream = $1 AND cursor >= $2)
		FROM `+s.streams+` WHERE stream = $1`, stream, int64(from)).Scan(&last, &newer)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, s.readErr(err)
	}
	if from > uint64(last)+1 {
		return nil, 0, fmt.Errorf("%w: stream %q cursor %d, end %d", store.ErrCursorBeyondEnd, stream, from, last)
	}
	if newer {
		return nil, from, nil
	}
	return nil, uint64(last) + 1, nil
}

func (s *Store) readErr(err error) error {
	if isClosed(err) {
		return fmt.Errorf("echopubsub postgres: read: %w: %w", store.ErrStoreClosed, err)
	}
	return fmt.Errorf("echopubsub postgres: read: %w", err)
}

// isClosed: pgxpool's (puddle's) error for a closed pool.
func isClosed(err error) bool { return err != nil && strings.Contains(err.Error(), "closed pool") }

// Close waits for queued appends to commit, then closes the pool when New
// opened it.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.commits.Close() // queued appends are committed first
	if s.owned {
		s.pool.Close()
	}
	return nil
}

func unquote(q string) string { return q[1 : len(q)-1] }

var _ store.Trimmer = (*Store)(nil)
