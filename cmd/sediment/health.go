package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// sediment health: the broker's admin endpoint asked whether it is up
// (/healthz) or ready for traffic (/readyz), for container health checks
// where there is no curl (the distroless image): exit status 0 if so, 1
// otherwise, with the reasons.
func newHealthCmd() *cobra.Command {
	var (
		admin    string
		ready    bool
		caughtUp bool
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check a broker through its admin endpoint: up (/healthz), or ready for traffic (--ready, /readyz)",
		Long: `Asks the broker's admin endpoint (--admin-address) and exits 0 when it
answers as wanted, 1 otherwise:

  sediment health                  the process is up (/healthz)
  sediment health --ready          ready for client traffic (/readyz): it hears
                                   the metadata quorum, is registered and unfenced
  sediment health --caught-up      ready, and in the ISR of every partition it
                                   replicates (/readyz?caught-up): the check
                                   between two brokers of a rolling restart

For Docker's HEALTHCHECK and Kubernetes exec probes, where the image has no
HTTP client.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			ctx, cancelT := context.WithTimeout(ctx, timeout)
			defer cancelT()
			if env := os.Getenv("SEDIMENT_ADMIN_ADDRESS"); env != "" && !cmd.Flags().Changed("admin-address") {
				admin = env // the broker's own variable, as in its container
			}
			path := "/healthz"
			switch {
			case caughtUp:
				path = "/readyz?caught-up"
			case ready:
				path = "/readyz"
			}
			return checkHealth(ctx, cmd.OutOrStdout(), admin, path)
		},
	}
	f := cmd.Flags()
	f.StringVar(&admin, "admin-address", "127.0.0.1:9644", "the broker's admin endpoint (host:port, its --admin-address; default SEDIMENT_ADMIN_ADDRESS if set)")
	f.BoolVar(&ready, "ready", false, "require readiness for client traffic (/readyz), not only a started process")
	f.BoolVar(&caughtUp, "caught-up", false, "require readiness and every replica of the broker in its ISR (/readyz?caught-up)")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return cmd
}

// checkHealth asks addr's path and prints the answer; an error unless 200.
func checkHealth(ctx context.Context, out io.Writer, addr, path string) error {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(addr, "/")+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	if strings.HasPrefix(path, "/readyz") {
		var r struct {
			Ready      bool     `json:"ready"`
			Reasons    []string `json:"reasons"`
			CatchingUp int      `json:"catching_up_partitions"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("health: %s answered %s: %q", path, resp.Status, strings.TrimSpace(string(body)))
		}
		if resp.StatusCode == http.StatusOK && r.Ready {
			fmt.Fprintf(out, "ready (%d partitions catching up)\n", r.CatchingUp)
			return nil
		}
		if len(r.Reasons) == 0 {
			r.Reasons = []string{resp.Status}
		}
		return errors.New("not ready: " + strings.Join(r.Reasons, "; "))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %s", path, resp.Status)
	}
	fmt.Fprintln(out, strings.TrimSpace(string(body)))
	return nil
}
