package sessionsoak

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub/test/chaos"
)

// TestRowLogCutsATornLastLine: a kill -9 in the middle of a copy leaves a
// last line without its newline; the next process's log must cut it off,
// or its first line runs on from the fragment and the log no longer
// loads (seen in a long soak: "invalid character 'C' after object key").
func TestRowLogCutsATornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n0.rows")
	whole := "{\"Cursor\":1,\"Gap\":false,\"Origin\":\"a\",\"Reason\":\"\",\"Publisher\":\"p\",\"Seq\":1}\n"
	if err := os.WriteFile(path, []byte(whole+"{\"Cursor\":2,\"Gap\":fa"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := OpenRowLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.last != 1 {
		t.Fatalf("last cursor %d, want 1", l.last)
	}
	if _, err := l.f.Write([]byte("{\"Cursor\":2,\"Gap\":false,\"Origin\":\"a\",\"Reason\":\"\",\"Publisher\":\"p\",\"Seq\":2}\n")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := LoadRows(path)
	if err != nil {
		t.Fatalf("the log after a torn line and a new one does not load: %v", err)
	}
	want := []chaos.StoreRow{{Cursor: 1, Origin: "a", Publisher: "p", Seq: 1}, {Cursor: 2, Origin: "a", Publisher: "p", Seq: 2}}
	if len(rows) != len(want) || rows[0] != want[0] || rows[1] != want[1] {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
}
