package docref

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// decls is what the repository declares: each package by directory and by
// its name, each type's members, and every exported name.
type decls struct {
	byDir   map[string]map[string]bool // "store/seglog" -> exported top-level names
	byName  map[string][]string        // "seglog" -> dirs of packages with that name
	members map[string]map[string]bool // type name -> its methods and fields
	methods map[string]map[string]bool // "ringbuf" dir -> methods of its types (prose writes ringbuf.WriteAt)
	all     map[string]bool            // every exported name: top-level, method, field
}

// repoRoot is the repository's top directory (two levels up from here).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// trackedFiles lists the files git tracks under root whose name matches
// one of the patterns (the docs are what the repository ships, not what a
// session left lying around).
func trackedFiles(t *testing.T, root string, patterns ...string) []string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"ls-files", "--"}, patterns...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}

func parseRepo(t *testing.T, root string) *decls {
	t.Helper()
	d := &decls{byDir: map[string]map[string]bool{}, byName: map[string][]string{},
		members: map[string]map[string]bool{}, methods: map[string]map[string]bool{}, all: map[string]bool{}}
	fset := token.NewFileSet()
	for _, rel := range trackedFiles(t, root, "*.go") {
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if strings.HasSuffix(rel, "_test.go") {
			// Tests, benchmarks and examples are named in the docs too;
			// an external test package's names are its directory's.
			dir += "_test"
		}
		d.addFile(dir, f)
	}
	d.addExternal(t, root)
	d.addProtoAndJS(t, root)
	return d
}

// external are the packages of other modules whose names the docs use:
// protoactor's (system messages such as Terminated and Watch) and
// protobuf's well-known types. They resolve from the module cache, where
// building this module put them.
var external = []string{
	"github.com/asynkron/protoactor-go/actor",
	"github.com/asynkron/protoactor-go/remote",
	"github.com/asynkron/protoactor-go/cluster",
	"google.golang.org/grpc/codes",
	"google.golang.org/protobuf/types/known/anypb",
	"google.golang.org/protobuf/types/known/timestamppb",
	"google.golang.org/protobuf/types/known/wrapperspb",
	"google.golang.org/protobuf/types/known/structpb",
}

// notGo are words the docs write as code that are no Go name of any
// module this repository builds: a Kubernetes StatefulSet's podManagementPolicy
// value, a metric's label, a nats-server option (test/e2e's module).
var notGo = map[string]bool{"OrderedReady": true, "By": true, "SyncAlways": true,
	// Names of products and of other projects' options, in prose.
	"EchoPubSub": true, "WebSocket": true, "WebSockets": true, "JavaScript": true, "OpenTelemetry": true,
	"JetStream": true, "ScoreBoard": true, "PubAck": true, "AckExplicit": true, "ExitOnError": true,
	"AcceptOptions": true, "StatefulSet": true}

func (d *decls) addExternal(t *testing.T, root string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-f", "{{.Dir}}"}, external...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", external, err)
	}
	fset := token.NewFileSet()
	for i, dir := range strings.Fields(string(out)) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", e.Name(), err)
			}
			d.addFile(external[i], f)
		}
	}
}

var (
	protoMessage = regexp.MustCompile(`(?m)^\s*(?:message|enum)\s+([A-Za-z0-9_]+)`)
	jsName       = regexp.MustCompile(`(?m)\b(?:class|function)\s+([A-Za-z_][A-Za-z0-9_]*)`)
	alertRule    = regexp.MustCompile(`(?m)^\s*- alert:\s+([A-Za-z0-9_]+)`)
)

// addProtoAndJS adds the .proto messages (their Go types are generated;
// the docs write their fields as in the .proto), the JavaScript
// client's classes and functions, and the alerts of the Prometheus rules
// in deploy/prometheus (docs/operations.md names them).
func (d *decls) addProtoAndJS(t *testing.T, root string) {
	t.Helper()
	for _, rel := range trackedFiles(t, root, "*.proto", "*.js", "deploy/prometheus/*.yml") {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		re := jsName
		if strings.HasSuffix(rel, ".proto") {
			re = protoMessage
		} else if strings.HasSuffix(rel, ".yml") {
			re = alertRule // the alerts docs/operations.md names
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			d.all[m[1]] = true
		}
	}
}

func (d *decls) member(dir, typ, name string) {
	if d.methods[dir] == nil {
		d.methods[dir] = map[string]bool{}
	}
	d.methods[dir][name] = true
	if d.members[typ] == nil {
		d.members[typ] = map[string]bool{}
	}
	d.members[typ][name] = true
	d.all[name] = true
}

func (d *decls) top(dir, name string) {
	d.byDir[dir][name] = true
	d.all[name] = true
}

func (d *decls) addFile(dir string, f *ast.File) {
	if d.byDir[dir] == nil {
		d.byDir[dir] = map[string]bool{}
		name := strings.TrimSuffix(f.Name.Name, "_test")
		d.byName[name] = append(d.byName[name], dir)
	}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil {
				d.top(dir, decl.Name.Name)
				continue
			}
			if typ := recvType(decl.Recv.List[0].Type); typ != "" {
				d.member(dir, typ, decl.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				d.addSpec(dir, spec)
			}
		}
	}
}

func (d *decls) addSpec(dir string, spec ast.Spec) {
	switch spec := spec.(type) {
	case *ast.ValueSpec:
		for _, n := range spec.Names {
			d.top(dir, n.Name)
		}
	case *ast.TypeSpec:
		d.top(dir, spec.Name.Name)
		typ := spec.Name.Name
		if d.members[typ] == nil {
			d.members[typ] = map[string]bool{}
		}
		var fields *ast.FieldList
		switch t := spec.Type.(type) {
		case *ast.StructType:
			fields = t.Fields
		case *ast.InterfaceType:
			fields = t.Methods
		}
		if fields == nil {
			return
		}
		for _, fl := range fields.List {
			for _, n := range fl.Names {
				d.member(dir, typ, n.Name)
			}
			if len(fl.Names) == 0 { // embedded: its name is a field
				if name := recvType(fl.Type); name != "" {
					d.member(dir, typ, name)
				}
			}
		}
	}
}

// recvType is the type name in a receiver or an embedded field: T, *T,
// T[P], pkg.T.
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	// A reference: dotted Go names, perhaps behind a directory path, with
	// a call's parentheses or a pointer's star.
	refShape = regexp.MustCompile(`^\*?(?:[a-z0-9_]+(?:/[a-z0-9_]+)*/)?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?$`)
	// In Go comments, a reference to this repository's packages written as
	// prose: seglog.Open, store/seglog.Open, internal/core.LocalStore.
	proseRef = regexp.MustCompile(`\b(?:[a-z0-9_]+/)*[a-z0-9_]+\.[A-Z][A-Za-z0-9_]*(?:\.[A-Z][A-Za-z0-9_]*)?\b`)
	docLink  = regexp.MustCompile(`\[(\*?[A-Za-z_][A-Za-z0-9_./]*)\]`)
	// In Go comments, a word of two or more capitalised parts reads as a Go
	// name (RequestSession); prose has few of them.
	camelWord = regexp.MustCompile(`\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b`)
	// "package actors/session", "in store/seglog": a directory of ours.
	pkgPath = regexp.MustCompile(`\bpackage ([a-z0-9_]+(?:/[a-z0-9_]+)+)\b`)
)

// A problem is one reference that does not resolve.
type problem struct{ where, ref, why string }

// check resolves ref and says why it does not, or "" when it does (or is
// no Go reference: a metric name, another module's variable).
func (d *decls) check(root, ref string) string {
	ref = strings.TrimSuffix(strings.TrimPrefix(ref, "*"), "()")
	dir := ""
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		dir, ref = ref[:i], ref[i+1:]
	}
	parts := strings.Split(ref, ".")
	for i, p := range parts[1:] {
		if !unicode.IsLower(rune(p[0])) {
			continue
		}
		if !strings.Contains(p, "_") || !unicode.IsUpper(rune(parts[i][0])) {
			// echopubsub.batches.acked: a metric; store.postgres_url: a
			// setting of echopubsub serve. Not Go.
			return ""
		}
		parts[i+1] = camel(p) // a .proto field of a message type: its Go name
	}
	if dir != "" {
		if len(parts) == 1 && !strings.Contains(ref, ".") {
			return d.checkDir(root, dir+"/"+ref)
		}
		return d.checkIn(dir+"/"+parts[0], parts[1:])
	}
	head := parts[0]
	if len(parts) == 1 {
		if !exportedIdent(head) || d.all[head] || notGo[head] {
			return ""
		}
		return "no such name in this repository"
	}
	if dirs, ok := d.byName[head]; ok {
		var why string
		for _, dir := range dirs {
			if why = d.checkIn(dir, parts[1:]); why == "" {
				return ""
			}
		}
		return why
	}
	if unicode.IsUpper(rune(head[0])) {
		if _, ok := d.members[head]; !ok && !notGo[ref] {
			return "no type " + head + " in this repository"
		}
		return d.checkMembers(head, parts[1:])
	}
	return "" // a variable, or a package of another module
}

// checkDir: a path such as store/seglog, test/e2e/demo or
// deploy/Dockerfile must exist (a directory or a file) when it starts with
// one of this repository's top-level directories (crypto/x509 is the
// standard library's).
func (d *decls) checkDir(root, path string) string {
	first := strings.Split(path, "/")[0]
	if fi, err := os.Stat(filepath.Join(root, first)); err != nil || !fi.IsDir() {
		return ""
	}
	if _, err := os.Stat(filepath.Join(root, path)); err != nil {
		return "no directory or file " + path
	}
	return ""
}

// camel turns a .proto field name into its generated Go name.
func camel(s string) string {
	var b strings.Builder
	for _, w := range strings.Split(s, "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

func (d *decls) checkIn(dir string, parts []string) string {
	names, ok := d.byDir[dir]
	if !ok {
		return "no package " + dir
	}
	if len(parts) == 0 {
		return ""
	}
	if !names[parts[0]] && (len(parts) > 1 || !d.methods[dir][parts[0]]) {
		return "package " + dir + " has no " + parts[0]
	}
	return d.checkMembers(parts[0], parts[1:])
}

func (d *decls) checkMembers(typ string, parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	if !d.members[typ][parts[0]] {
		return typ + " has no method or field " + parts[0]
	}
	return ""
}

// exportedIdent reports whether s reads as a Go exported identifier worth
// checking: upper case first, some lower case (not an environment variable
// or an acronym), no underscore.
func exportedIdent(s string) bool {
	if s == "" || !unicode.IsUpper(rune(s[0])) || strings.Contains(s, "_") {
		return false
	}
	return strings.IndexFunc(s, unicode.IsLower) >= 0
}

// mdRefs lists the references a markdown file writes as code.
func mdRefs(text string) []string {
	var refs []string
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		s := m[1]
		if refShape.MatchString(s) && !fileName(s) {
			refs = append(refs, s)
		}
	}
	return refs
}

// fileName: go.mod, main.go, docs/x.md and the like are not identifiers.
func fileName(s string) bool {
	for _, ext := range []string{".go", ".mod", ".sum", ".md", ".proto", ".json", ".js", ".html", ".yaml", ".yml", ".txt", ".svg", ".png", ".sh", ".work"} {
		if strings.HasSuffix(s, ext) {
			return true
		}
	}
	return false
}

// commentRefs lists the references a Go file's comments make to this
// repository's packages and names: doc links, code spans, and prose of the
// form pkg.Name where pkg is one of ours.
func (d *decls) commentRefs(f *ast.File) []string {
	var refs []string
	for _, cg := range f.Comments {
		text := cg.Text()
		for _, m := range docLink.FindAllStringSubmatch(text, -1) {
			refs = append(refs, m[1])
		}
		for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
			if refShape.MatchString(m[1]) && !fileName(m[1]) {
				refs = append(refs, m[1])
			}
		}
		for _, loc := range camelWord.FindAllStringIndex(text, -1) {
			if loc[0] == 0 || !strings.ContainsAny(text[loc[0]-1:loc[0]], "./-") {
				refs = append(refs, text[loc[0]:loc[1]]) // not time.UnixNano: another package's
			}
		}
		for _, m := range pkgPath.FindAllStringSubmatch(text, -1) {
			refs = append(refs, m[1])
		}
		for _, m := range proseRef.FindAllString(text, -1) {
			head := strings.Split(m[strings.LastIndex(m, "/")+1:], ".")[0]
			if _, ours := d.byName[head]; ours && (!strings.Contains(m, "/") || d.byDir[m[:strings.LastIndex(m, "/")+1]+head] != nil) {
				refs = append(refs, m)
			}
		}
	}
	return refs
}

// problems resolves every reference in the README, docs/*.md and every Go
// file's comments.
func problems(t *testing.T, root string, d *decls) []problem {
	t.Helper()
	var out []problem
	for _, rel := range trackedFiles(t, root, "README.md", "docs/*.md", "*/README.md") {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		refs := mdRefs(string(b))
		for _, m := range pkgPath.FindAllStringSubmatch(string(b), -1) {
			refs = append(refs, m[1])
		}
		for _, ref := range refs {
			if why := d.check(root, ref); why != "" {
				out = append(out, problem{rel, ref, why})
			}
		}
		for _, p := range d.tableRows(string(b)) {
			out = append(out, problem{rel, p.ref, p.why})
		}
	}
	fset := token.NewFileSet()
	for _, rel := range trackedFiles(t, root, "*.go") {
		if strings.HasSuffix(rel, ".pb.go") || strings.HasSuffix(rel, "_test.go") {
			continue // generated; tests' comments speak of other projects freely
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		for _, ref := range d.commentRefs(f) {
			if why := d.check(root, ref); why != "" {
				out = append(out, problem{rel, ref, why})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where+out[i].ref < out[j].where+out[j].ref })
	return out
}

// TestDocsNameOnlyWhatExists: every identifier the README, docs/*.md and
// the Go comments name as code exists in this repository.
func TestDocsNameOnlyWhatExists(t *testing.T) {
	root := repoRoot(t)
	d := parseRepo(t, root)
	for _, p := range problems(t, root, d) {
		t.Errorf("%s names `%s`: %s", p.where, p.ref, p.why)
	}
}

var (
	sentenceEnd  = regexp.MustCompile(`\.\s+|;|\),|\n\s*\n|\|`)
	callsDefault = regexp.MustCompile(`(?i)\bthe default\b|\(default\)|\bthe embedded default\b|\bstays the default\b`)
	boltWord     = regexp.MustCompile(`\b(?:store/bolt|bolt\.Open|bbolt|bolt)\b`)
	seglogWord   = regexp.MustCompile(`\b(?:store/seglog|seglog|segmented log|log store|embedded log)\b`)
)

// defaultStoreClaims lists the sentences of text that call bolt the
// default store: the embedded default is store/seglog (the README, the demo
// and docs/operations.md), and every doc must say the same.
func defaultStoreClaims(text string) []string {
	var out []string
	for _, s := range sentenceEnd.Split(text, -1) {
		s = strings.Join(strings.Fields(s), " ")
		if callsDefault.MatchString(s) && boltWord.MatchString(s) && !seglogWord.MatchString(s) {
			out = append(out, s)
		}
	}
	return out
}

// TestDocsAgreeOnTheDefaultStore: no doc, package doc or comment calls
// store/bolt the default store.
func TestDocsAgreeOnTheDefaultStore(t *testing.T) {
	root := repoRoot(t)
	for _, rel := range trackedFiles(t, root, "*.md", "*.go") {
		if strings.HasSuffix(rel, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range defaultStoreClaims(string(b)) {
			t.Errorf("%s calls bolt the default store (the default is store/seglog): %q", rel, s)
		}
	}
}

// tableRow is a row of a markdown table about one of this repository's
// packages: | `ringbuf` | ... (`Decide`, `Join`) |.
var tableRow = regexp.MustCompile("(?m)^\\| `([a-z0-9_/]+)` \\|(.*)$")

// tableRows resolves the bare names a package's table row writes as code
// in that package: its top-level names and its types' methods.
func (d *decls) tableRows(text string) []problem {
	var out []problem
	for _, m := range tableRow.FindAllStringSubmatch(text, -1) {
		dir := m[1]
		if dir == "echopubsub" || dir == "echopubsub (root)" {
			dir = "."
		}
		if d.byDir[dir] == nil {
			continue
		}
		for _, ref := range mdRefs(m[2]) {
			name := strings.TrimSuffix(strings.TrimPrefix(ref, "*"), "()")
			if !exportedIdent(name) || strings.Contains(name, ".") {
				continue
			}
			if !d.byDir[dir][name] && !d.methods[dir][name] {
				out = append(out, problem{ref: ref, why: "package " + dir + " has no " + name})
			}
		}
	}
	return out
}

// TestCheckerCatchesPlantedNames: the stale names this test was written
// for (each was in a doc once) are caught, and real names are not.
func TestCheckerCatchesPlantedNames(t *testing.T) {
	root := repoRoot(t)
	d := parseRepo(t, root)
	for _, ref := range []string{"ConsulConfig.Token", "DefaultConsulConfig", "NewConsul", "RequestSession",
		"Ephemeral", "consul.NewConsul", "echopubsub.Nope", "PubSub.Nope", "store/nope.Open",
		"actors/session", "seglog.Open.Nope", "Register.no_such_field"} {
		if d.check(root, ref) == "" {
			t.Errorf("planted `%s` resolved", ref)
		}
	}
	for _, ref := range []string{"consul.New", "consul.Config.Token", "ClassEphemeral", "PubSub.Broadcast",
		"*messages.CursorExpired", "seglog.Open", "internal/core.Runtime", "Register.supported_versions",
		"actor.PID", "Terminated", "ringbuf.WriteAt", "ps.Broadcast()", "test/e2e/demo", "crypto/x509"} {
		if why := d.check(root, ref); why != "" {
			t.Errorf("`%s` should resolve: %s", ref, why)
		}
	}
	row := "| `ringbuf` | the ring buffer (`Read`, `Join`) | x |\n"
	if ps := d.tableRows(row); len(ps) != 1 || ps[0].ref != "Read" {
		t.Errorf("table row with a name its package lacks: got %v", ps)
	}
	if c := defaultStoreClaims("Package bolt is the embedded Store, the default: one file."); len(c) != 1 {
		t.Errorf("a sentence calling bolt the default was not caught: %v", c)
	}
	if c := defaultStoreClaims("The embedded default is package store/seglog; module store/bolt is the other."); len(c) != 0 {
		t.Errorf("a sentence calling seglog the default was caught: %v", c)
	}
}
