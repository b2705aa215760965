package docref

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// defaultFields are the fields DefaultConfig sets in config.go (its
// composite literal's keys), but Name (the caller's) and SessionConfig
// (listed with the sessions).
func defaultFields(t *testing.T, root string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "config.go"), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "DefaultConfig" || fn.Recv != nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name != "Name" && k.Name != "SessionConfig" {
				fields = append(fields, k.Name)
			}
			return false
		})
	}
	if len(fields) == 0 {
		t.Fatal("no DefaultConfig in config.go")
	}
	return fields
}

// missingDefaults returns the fields that the README's paragraph of
// defaults ("Defaults are EchoPubSub's: ...", up to the blank line) does not
// list as "`Field value`".
func missingDefaults(readme string, fields []string) []string {
	start := strings.Index(readme, "Defaults are EchoPubSub's")
	if start < 0 {
		return fields
	}
	para := readme[start:]
	if end := strings.Index(para, "\n\n"); end >= 0 {
		para = para[:end]
	}
	var missing []string
	for _, f := range fields {
		if !strings.Contains(para, "`"+f+" ") {
			missing = append(missing, f)
		}
	}
	return missing
}

// Every default DefaultConfig sets is listed in the README with its value
// (the house rule: documented defaults): a field added to Config and to
// DefaultConfig is added there too.
func TestReadmeListsEveryDefault(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if missing := missingDefaults(string(readme), defaultFields(t, root)); len(missing) > 0 {
		t.Fatalf("README.md's defaults (\"Defaults are EchoPubSub's: ...\") do not list %v, which DefaultConfig sets", missing)
	}
}

// The check finds a default the paragraph leaves out, and one listed
// only after the paragraph ends.
func TestReadmeDefaultsCheckCatchesAMissingField(t *testing.T) {
	readme := "Defaults are EchoPubSub's: `PoolSize 1`, `BufferSize 10_000`.\n\n`AckInterval 1ms` elsewhere.\n"
	got := missingDefaults(readme, []string{"PoolSize", "AckInterval", "BufferSize"})
	if len(got) != 1 || got[0] != "AckInterval" {
		t.Fatalf("missingDefaults = %v, want [AckInterval]", got)
	}
}
