package docref

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fieldMethods are zerolog's Event and Context methods whose first argument
// is a key. The check reads the source without types: a method of this name
// with a key built by concatenation or fmt is a key built from data
// whatever its receiver, and no type of ours has such a method.
var fieldMethods = map[string]bool{
	"Str": true, "Strs": true, "Stringer": true, "Int": true, "Int32": true, "Int64": true,
	"Uint32": true, "Uint64": true, "Float64": true, "Bool": true, "Dur": true, "Durs": true,
	"Time": true, "Interface": true, "Any": true, "Array": true, "Dict": true, "Object": true,
	"Hex": true, "Bytes": true, "RawJSON": true, "AnErr": true, "Uints64": true, "Ints": true,
}

// logKeyProblems lists, for one Go file, every zerolog key built from data
// (a log query cannot name it, and every node makes a new key) and every
// Dur key that does not say its unit (zerolog writes a Dur in milliseconds,
// DurationFieldUnit: the key says "_ms").
func logKeyProblems(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !fieldMethods[sel.Sel.Name] {
			return true
		}
		pos := fset.Position(call.Pos())
		at := "line " + strconv.Itoa(pos.Line)
		key, lit := call.Args[0].(*ast.BasicLit)
		switch k := call.Args[0].(type) {
		case *ast.BinaryExpr:
			out = append(out, at+": log key built from data")
			return true
		case *ast.CallExpr:
			if s, ok := k.Fun.(*ast.SelectorExpr); ok && strings.HasPrefix(s.Sel.Name, "Sprint") {
				out = append(out, at+": log key built from data")
			}
			return true
		}
		if sel.Sel.Name == "Dur" && lit && key.Kind == token.STRING {
			name, _ := strconv.Unquote(key.Value)
			if !strings.HasSuffix(name, "_ms") {
				out = append(out, at+": duration key "+strconv.Quote(name)+" does not say its unit (_ms)")
			}
		}
		return true
	})
	return out
}

// TestLogKeysAreNamesWithUnits reads every Go file of every module: no log
// key is built from data, and every duration key says its unit.
func TestLogKeysAreNamesWithUnits(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	for _, rel := range trackedFiles(t, root, "*.go") {
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		for _, p := range logKeyProblems(fset, f) {
			t.Errorf("%s: %s", rel, p)
		}
	}
}

// TestLogKeyCheckCatchesPlantedKeys shows the check failing on the two
// defects it is for, and passing their fixes.
func TestLogKeyCheckCatchesPlantedKeys(t *testing.T) {
	src := `package p
func f(ev *zerolog.Event, node string, d time.Duration) {
	ev.Uint64("unacked_"+node, 1)
	ev.Int(fmt.Sprintf("lag_%s", node), 1)
	ev.Dur("took", d)
	ev.Dur("took_ms", d).Str("node", node)
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "planted.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := logKeyProblems(fset, f)
	want := []string{"line 3: log key built from data", "line 4: log key built from data",
		`line 5: duration key "took" does not say its unit`}
	if len(got) != len(want) {
		t.Fatalf("found %d problems, want %d: %q", len(got), len(want), got)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("problem %d = %q, want it to start %q", i, got[i], w)
		}
	}
}
