package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestReadmeQuickstart keeps the README's franz-go snippet true: it must be
// examples/quickstart/main.go verbatim, and that program must work against a
// broker.
func TestReadmeQuickstart(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	source, err := os.ReadFile("../examples/quickstart/main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\n// Command quickstart")
	if ok {
		block, _, ok = strings.Cut("// Command quickstart"+block, "```")
	}
	if !ok || block != string(source) {
		t.Errorf("README.md's quickstart block is not examples/quickstart/main.go; copy the file into the README")
	}

	bin := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sediment-io/sediment/examples/quickstart").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/quickstart: %v\n%s", err, out)
	}
	b := StartBroker(t, BrokerOptions{})
	r := run(t, "", nil, bin, "-brokers", b.Addr)
	if r.Err != nil {
		t.Fatalf("quickstart: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var got []string
	for _, l := range lines {
		_, rest, _ := strings.Cut(l, " ")
		got = append(got, rest)
	}
	sort.Strings(got)
	if want := "ada: hello, ada|edsger: hello, edsger|grace: hello, grace"; strings.Join(got, "|") != want {
		t.Errorf("quickstart printed:\n%s\nwant the three greetings", r.Stdout)
	}
}
