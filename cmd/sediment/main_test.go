package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestUnknownSubcommands: every command group found in newRootCmd's tree
// (the root too) refuses an unknown subcommand with cobra's error and a
// suggestion for a typo, and alone prints its help and succeeds. Before,
// `sediment topic creat x` printed the help and exited 0; only the root
// refused.
func TestUnknownSubcommands(t *testing.T) {
	var groups [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.HasSubCommands() {
			groups = append(groups, path)
		}
		for _, sub := range c.Commands() {
			walk(sub, append(path[:len(path):len(path)], sub.Name()))
		}
	}
	walk(newRootCmd(), nil)
	if len(groups) < 10 {
		t.Fatalf("found only %d command groups: %q", len(groups), groups)
	}
	exec := func(args ...string) (string, error) {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	for _, path := range groups {
		name := strings.Join(append([]string{"sediment"}, path...), " ")
		// Alone: its help (its usage the one line, as before it had an
		// action), no error.
		if out, err := exec(path...); err != nil || !strings.Contains(out, "Usage:\n  "+name+" [command]\n") {
			t.Errorf("%s: %v, output:\n%s\nwant its help", name, err, out)
		}
		// Unknown: refused, naming the command and the group.
		_, err := exec(append(path, "bogus-subcommand", "x")...)
		if want := `unknown command "bogus-subcommand" for "` + name + `"`; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s bogus-subcommand x: %v, want %s", name, err, want)
		}
		// A typo of a real subcommand: refused with a suggestion.
		var real string
		for _, sub := range newRootCmdAt(t, path).Commands() {
			if sub.IsAvailableCommand() && len(sub.Name()) > 3 {
				real = sub.Name()
				break
			}
		}
		if real == "" {
			continue
		}
		typo := real[:len(real)-1]
		_, err = exec(append(path, typo, "x")...)
		if err == nil || !strings.Contains(err.Error(), "Did you mean this?\n\t"+real+"\n") {
			t.Errorf("%s %s x: %v, want a suggestion of %s", name, typo, err, real)
		}
	}

	// As a process: exit status 1 and the error.
	p := sedimentProc(t, nil, "topic", "creat", "x")
	if code := p.wait(t, 20*time.Second); code != 1 || !strings.Contains(p.output(), `sediment: unknown command "creat" for "sediment topic"`) ||
		!strings.Contains(p.output(), "Did you mean this?\n\tcreate") {
		t.Fatalf("sediment topic creat x: exit status %d, want 1; stderr:\n%s", code, p.output())
	}
}

// newRootCmdAt returns the command at path in a new tree.
func newRootCmdAt(t *testing.T, path []string) *cobra.Command {
	t.Helper()
	c, rest, err := newRootCmd().Find(path)
	if err != nil || len(rest) != 0 {
		t.Fatalf("find %q: %v (left %q)", path, err, rest)
	}
	return c
}
