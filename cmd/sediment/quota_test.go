package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestParseQuotaSettings(t *testing.T) {
	ops, err := parseQuotaSettings([]string{"producer_byte_rate=1048576,consumer_byte_rate=2097152", " request_percentage = 50 "})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range ops {
		got = append(got, o.Key+"="+strconv.FormatFloat(o.Value, 'f', -1, 64))
	}
	if strings.Join(got, " ") != "producer_byte_rate=1048576 consumer_byte_rate=2097152 request_percentage=50" {
		t.Fatalf("parsed %q", got)
	}
	for _, bad := range [][]string{{}, {","}, {"producer_byte_rate"}, {"=5"}, {"producer_byte_rate=fast"}} {
		if _, err := parseQuotaSettings(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestQuotaEntityFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // entity, or "error"
	}{
		{[]string{"--user", "alice"}, "{user=alice}"},
		{[]string{"--user-defaults", "--client", "app"}, "{user=<default>, client-id=app}"},
		{[]string{"--client-defaults"}, "{client-id=<default>}"},
		{nil, "error"},
		{[]string{"--user", ""}, "error"},
		{[]string{"--user", "a", "--user-defaults"}, "error"},
		{[]string{"--client", "a", "--client-defaults"}, "error"},
		{[]string{"--ip", "10.0.0.7"}, "{ip=10.0.0.7}"},
		{[]string{"--ip-defaults"}, "{ip=<default>}"},
		{[]string{"--user", "alice", "--ip", "10.0.0.7"}, "error"},
		{[]string{"--client-defaults", "--ip-defaults"}, "error"},
	} {
		var ef quotaEntityFlags
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		ef.add(cmd)
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		e, err := ef.entity(cmd)
		got := "error"
		if err == nil {
			got = e.String()
		}
		if got != c.want {
			t.Errorf("%q: %s, want %s", c.args, got, c.want)
		}
	}
}
