package echopubsub_test

import (
	"os"
	"strings"
	"testing"
)

// The README's Use section quotes Example's body: this keeps the quote and
// the compiled, run example the same code.
func TestReadmeQuotesExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "func Example() {\n")
	end := strings.Index(s, "\t// Output:\n\t// 1-0")
	if start < 0 || end < 0 {
		t.Fatal("example_test.go: func Example or its Output not found")
	}
	var body []string
	for _, l := range strings.Split(strings.TrimRight(s[start+len("func Example() {\n"):end], "\n"), "\n") {
		body = append(body, strings.TrimPrefix(l, "\t"))
	}
	if !strings.Contains(string(readme), strings.Join(body, "\n")+"\n```") {
		t.Fatalf("README.md's Use section does not quote Example's body; it should contain:\n%s", strings.Join(body, "\n"))
	}
}
