package kube

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instr is one Dockerfile instruction: its keyword in capitals, its
// arguments as written (continuations joined), and the JSON array when it
// is written in exec form (ENTRYPOINT ["..."]).
type instr struct {
	cmd  string
	args string
	exec []string
}

// stage is one FROM and the instructions under it.
type stage struct {
	from, name string
	instrs     []instr
}

// parseDockerfile reads the instructions of a Dockerfile: comments and
// blank lines skipped, a line ending in a backslash joined with the next.
// It understands what deploy/Dockerfile uses, and fails on a parser
// directive or heredoc it would misread.
func parseDockerfile(path string) ([]stage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var stages []stage
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		full := cur.String()
		cur.Reset()
		if strings.Contains(full, "<<") {
			return nil, fmt.Errorf("%s: heredoc not understood: %q", path, full)
		}
		kw, args, _ := strings.Cut(full, " ")
		in := instr{cmd: strings.ToUpper(kw), args: strings.TrimSpace(args)}
		if strings.HasPrefix(in.args, "[") {
			if err := json.Unmarshal([]byte(in.args), &in.exec); err != nil {
				return nil, fmt.Errorf("%s: %s %s: %v", path, in.cmd, in.args, err)
			}
		}
		if in.cmd == "FROM" {
			words := strings.Fields(in.args)
			st := stage{from: words[0]}
			if len(words) == 3 && strings.EqualFold(words[1], "AS") {
				st.name = words[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("%s: %s before FROM", path, in.cmd)
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("%s: ends in a continuation", path)
	}
	return stages, sc.Err()
}

// shellWords splits a shell command line into words, with single and
// double quotes and backslash escapes. Anything a shell would treat as an
// operator is an error: the caller runs the words itself, with no shell.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord, quote := false, rune(0)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == '\'':
			w.WriteRune(r)
		case r == '\\' && i+1 < len(rs):
			i++
			w.WriteRune(rs[i])
			inWord = true
		case quote == '"':
			if r == '$' || r == '`' {
				return nil, fmt.Errorf("shell expansion in %q", s)
			}
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.ContainsRune("&|;<>()$`*?", r):
			return nil, fmt.Errorf("shell operator or expansion %q in %q", r, s)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// goBuild is the static build a Dockerfile's build stage runs: the
// environment assignments before `go`, go's arguments, and the output
// path (-o).
type goBuild struct {
	stage string   // the stage's name (COPY --from= refers to it)
	env   []string // NAME=value before the command
	args  []string // go's arguments, "build" first
	out   string   // the -o path
}

// findGoBuild finds the one RUN of the Dockerfile that runs `go build`.
func findGoBuild(stages []stage) (goBuild, error) {
	var found []goBuild
	for _, st := range stages {
		for _, in := range st.instrs {
			if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
				continue
			}
			words, err := shellWords(in.args)
			if err != nil {
				return goBuild{}, fmt.Errorf("RUN %s: %v", in.args, err)
			}
			for len(words) > 0 && strings.HasPrefix(words[0], "--") { // RUN --mount=...
				words = words[1:]
			}
			b := goBuild{stage: st.name}
			for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
				b.env, words = append(b.env, words[0]), words[1:]
			}
			if len(words) < 2 || words[0] != "go" || words[1] != "build" {
				return goBuild{}, fmt.Errorf("RUN %s: not a plain `go build` command", in.args)
			}
			b.args = words[1:]
			for i, a := range b.args {
				if a == "-o" && i+1 < len(b.args) {
					b.out = b.args[i+1]
				}
			}
			if b.out == "" {
				return goBuild{}, fmt.Errorf("RUN %s: no -o", in.args)
			}
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		return goBuild{}, fmt.Errorf("want one RUN with `go build`, found %d", len(found))
	}
	return found[0], nil
}

// build runs b from the repository's root with its environment, its
// output in dir instead of b.out.
func (b goBuild) build(dir string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(b.out))
	args := slices.Clone(b.args)
	args[slices.Index(args, "-o")+1] = bin
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	// As in the image's build stage: the repository's go.work in use
	// whatever this process's GOWORK says.
	cmd.Env = append(append(os.Environ(), "GOWORK="), b.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s go %s: %v\n%s", strings.Join(b.env, " "), strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// staticELF reports why the binary at path is not statically linked, or "".
func staticELF(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "it has a program interpreter (dynamically linked)", nil
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return "", err
	}
	if len(libs) > 0 {
		return fmt.Sprintf("it needs shared libraries %v", libs), nil
	}
	return "", nil
}

// TestDockerfile checks deploy/Dockerfile against what it builds and what
// serve exposes: a multi-stage build whose one `go build` is static
// (CGO_ENABLED=0, and the binary this test builds with the same command
// has no interpreter and no shared library), a minimal final stage that
// copies that binary and runs it as `serve` under a non-root user, and
// EXPOSE listing the ports of serve's listen settings (their defaults, as
// `serve --help` prints them). No container builder can build the image on
// these machines (docs/server.md, "Deploy on Kubernetes"): building the
// same binary with the same command is the part that can be checked here.
func TestDockerfile(t *testing.T) {
	stages, err := parseDockerfile(filepath.Join(repoRoot, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build, got %d stage(s)", len(stages))
	}
	b, err := findGoBuild(stages)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(b.env, "CGO_ENABLED=0") {
		t.Errorf("the go build runs with %v: want CGO_ENABLED=0 (a static binary)", b.env)
	}
	if pkg := b.args[len(b.args)-1]; pkg != "./cmd/echopubsub" {
		t.Errorf("the go build builds %q, want ./cmd/echopubsub", pkg)
	}
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("final stage FROM %s: want distroless/static or scratch", final.from)
	}

	// The final stage copies the built binary from the build stage, and
	// its ENTRYPOINT and CMD run that copy as `serve`.
	var dest, user string
	var entry, cmd []string
	var exposed []int
	for _, in := range final.instrs {
		switch in.cmd {
		case "COPY":
			w := strings.Fields(in.args)
			if slices.Contains(w, "--from="+b.stage) && len(w) >= 2 && w[len(w)-2] == b.out {
				dest = w[len(w)-1]
			}
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entry = in.exec
		case "CMD":
			cmd = in.exec
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Fatalf("EXPOSE %s: %v", in.args, err)
				}
				exposed = append(exposed, n)
			}
		}
	}
	if dest == "" {
		t.Fatalf("the final stage does not COPY --from=%s %s", b.stage, b.out)
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("the final stage runs as USER %q: want a non-root user", user)
	}
	if argv := append(slices.Clone(entry), cmd...); len(argv) < 2 || argv[0] != dest || argv[1] != "serve" {
		t.Errorf("ENTRYPOINT %q CMD %q runs %q: want the copied binary %s with serve (both in exec form)", entry, cmd, argv, dest)
	}

	bin := serveBinary(t)
	flags := serveFlags(t, bin)
	var want []int
	for _, key := range []string{"node.listen", "admin.listen", "http.listen"} {
		want = append(want, portOf(t, key, flags.def(t, key)))
	}
	slices.Sort(want)
	slices.Sort(exposed)
	if !slices.Equal(exposed, want) {
		t.Errorf("EXPOSE %v, want the ports of node.listen, admin.listen and http.listen: %v", exposed, want)
	}
	if why, err := staticELF(bin); err != nil || why != "" {
		t.Errorf("the binary the Dockerfile's build command makes is not static: %s%v", why, err)
	}
}

// TestShellWords: the splitter the build command goes through.
func TestShellWords(t *testing.T) {
	got, err := shellWords(`A=0 go build -ldflags="-s -w" -o '/out/x y' ./cmd\ x`)
	if want := []string{"A=0", "go", "build", "-ldflags=-s -w", "-o", "/out/x y", "./cmd x"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("shellWords = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"go build && rm -rf /", `go build -o "$OUT"`, "go build 'x"} {
		if _, err := shellWords(bad); err == nil {
			t.Errorf("shellWords(%q): no error", bad)
		}
	}
}
