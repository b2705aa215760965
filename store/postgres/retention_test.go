package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/echopubsub/echopubsub"
)

// TestRowsWithoutTimeReadAndTrim: rows of tables created before rows
// carried their append time (New adds appended_at, NULL for them) read back with the zero Time, and
// MaxAge removes them only together with a later timed row that is too
// old: never on their own.
func TestRowsWithoutTimeReadAndTrim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The schema as New created it before appended_at, with rows.
	p := newPrefix()
	conn, err := pgx.Connect(ctx, server.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	streams, records := pgx.Identifier{p + "streams"}.Sanitize(), pgx.Identifier{p + "records"}.Sanitize()
	for _, q := range []string{
		`CREATE TABLE ` + streams + ` (stream text PRIMARY KEY, last_cursor bigint NOT NULL)`,
		`CREATE TABLE ` + records + ` (stream text NOT NULL, cursor bigint NOT NULL, kind smallint NOT NULL,
			origin text NOT NULL, payload_type text NOT NULL, payload bytea NOT NULL, missed bigint NOT NULL,
			reason text NOT NULL, PRIMARY KEY (stream, cursor))`,
		`INSERT INTO ` + streams + ` VALUES ('legacy', 3), ('mixed', 3)`,
		`INSERT INTO ` + records + ` SELECT s, c, 1, 'node-a:1', 'test.Stamp', 'old', 0, ''
			FROM unnest(ARRAY['legacy', 'mixed']) s, generate_series(1, 3) c`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, p) // adds the column
	defer s.Close()
	old := echopubsub.Record{Kind: echopubsub.RecordMessage, Origin: "node-a:1", PayloadType: "test.Stamp", Payload: []byte("old")}
	recs, next, err := s.Read(ctx, "legacy", 0, 10)
	if err != nil || len(recs) != 3 || next != 4 || !recs[0].Time.IsZero() {
		t.Fatalf("rows without a time: %+v next %d err %v", recs, next, err)
	}
	tooOld, fresh := old, old
	tooOld.Stream, tooOld.Time, fresh.Stream = "mixed", time.Now().Add(-2*time.Hour), "mixed"
	if err := s.Append(ctx, []echopubsub.Record{tooOld, fresh}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Trim(ctx, echopubsub.Retention{MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	want := echopubsub.Trimmed{Stream: "mixed", Rows: 4, Bytes: 4 * uint64(len(old.Payload)), FirstKept: 5}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Trim MaxAge 1h: %+v, want only %+v (untimed rows alone never go for their age)", got, want)
	}
}
