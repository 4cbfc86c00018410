package e2e

import (
	"strings"
	"testing"
	"time"
)

// featureRow finds a feature's line in `sediment cluster features
// describe` and returns its fields (FEATURE SUPPORTED-MIN SUPPORTED-MAX
// FINALIZED EPOCH).
func featureRow(out, name string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == name {
			return f
		}
	}
	return nil
}

// TestClusterFeatures: `sediment cluster features` as an operator runs it
// on a 3-broker cluster: a downgrade of transaction.version sent to one
// broker reaches every broker's ApiVersions through the metadata log and
// survives a restart; a dry run changes nothing; refusals name the reason.
func TestClusterFeatures(t *testing.T) {
	t.Parallel() // see TestMain
	c := StartCluster(t, 3)
	b1, b3 := c.Brokers[0], c.Brokers[2]
	out := b1.sediment(t, "", "cluster", "features", "describe").Stdout
	if f := featureRow(out, "transaction.version"); f == nil || f[1] != "0" || f[2] != "2" || f[3] != "2" {
		t.Fatalf("describe before any change:\n%s", out)
	}
	if f := featureRow(out, "group.version"); f == nil || f[3] != "1" {
		t.Fatalf("describe before any change:\n%s", out)
	}

	// Refused: a downgrade as an upgrade, a level out of range, an unknown
	// feature, a malformed flag.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"upgrade", "--feature", "transaction.version=1"}, "can't downgrade"},
		{[]string{"upgrade", "--feature", "transaction.version=9"}, "only supports versions 0-2"},
		{[]string{"upgrade", "--feature", "metadata.version=20"}, "does not support the given feature"},
		{[]string{"downgrade", "--feature", "transaction.version"}, "want name=level"},
		{[]string{"downgrade"}, "no --feature"},
	} {
		r := b1.sedimentMayFail(t, "", append([]string{"cluster", "features"}, tc.args...)...)
		if r.Err == nil || !strings.Contains(r.Stderr, tc.want) {
			t.Fatalf("sediment cluster features %v: %v\n%s%s\nwant an error saying %q", tc.args, r.Err, r.Stdout, r.Stderr, tc.want)
		}
	}
	if out := b1.sediment(t, "", "cluster", "features", "downgrade", "--dry-run", "--feature", "transaction.version=1").Stdout; !strings.Contains(out, "dry run") {
		t.Fatalf("dry run: %s", out)
	}
	if f := featureRow(b3.sediment(t, "", "cluster", "features", "describe").Stdout, "transaction.version"); f[3] != "2" || f[4] != "0" {
		t.Fatalf("after a dry run: %v", f)
	}

	b1.sediment(t, "", "cluster", "features", "downgrade", "--feature", "transaction.version=1")
	for _, b := range c.Brokers {
		waitFor(t, 30*time.Second, "transaction.version 1 on every broker", func() bool {
			f := featureRow(b.sediment(t, "", "cluster", "features", "describe").Stdout, "transaction.version")
			return f != nil && f[3] == "1" && f[4] != "0"
		})
	}
	b1.sediment(t, "", "cluster", "features", "disable", "--feature", "group.version")
	b3.Stop()
	b3.Start()
	out = b3.sediment(t, "", "cluster", "features", "describe").Stdout
	if f, g := featureRow(out, "transaction.version"), featureRow(out, "group.version"); f[3] != "1" || g[3] != "0" {
		t.Fatalf("after a restart:\n%s", out)
	}
	b3.sediment(t, "", "cluster", "features", "upgrade", "--feature", "transaction.version=2", "--feature", "group.version=1")
	waitFor(t, 30*time.Second, "the upgrade on broker 1", func() bool {
		out := b1.sediment(t, "", "cluster", "features", "describe").Stdout
		f, g := featureRow(out, "transaction.version"), featureRow(out, "group.version")
		return f != nil && g != nil && f[3] == "2" && g[3] == "1"
	})
}
