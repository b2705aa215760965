package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storetest"
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
	storetest.UntimedRows(t, s, old)
}
