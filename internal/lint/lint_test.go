// Package lint holds the project's own lint rules as tests: the import
// arrows of docs/architecture.md and a few forbidden imports.
package lint

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sediment-io/sediment"

// allowed lists, for each room, the rooms of ours it may import. internal/*
// is open to every room; a room not listed here (cmd, e2e) may import anything.
var allowed = map[string][]string{
	"hotlog":      {},
	"objectstore": {},
	"metadata":    {},
	"tiering":     {"hotlog", "objectstore"},
	"compaction":  {"hotlog", "objectstore", "tiering"},
	"broker":      {"hotlog", "objectstore", "metadata", "tiering", "compaction", "broker"},
	"internal":    {},
}

// forbidden lists imports that must not appear in a room's non-test code.
var forbidden = map[string][]string{
	// hotlog and compaction reach the disk only through internal/vfs.
	"hotlog":     {"os"},
	"compaction": {"os"},
}

func room(pkg string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	if i := strings.IndexByte(rel, '/'); i >= 0 {
		rel = rel[:i]
	}
	return rel
}

func TestImportArrows(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg, imports := fields[0], fields[1:]
		from := room(pkg)
		rooms, ruled := allowed[from]
		for _, imp := range imports {
			for _, bad := range forbidden[from] {
				if imp == bad {
					t.Errorf("%s imports %q: %s must go through internal/vfs", pkg, imp, from)
				}
			}
			if !ruled || !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := room(imp)
			if to == "internal" || to == from {
				continue
			}
			ok := false
			for _, r := range rooms {
				if r == to {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s imports %s: %s may not import %s (see docs/architecture.md)", pkg, imp, from, to)
			}
		}
	}
}
