package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/sediment-io/sediment/broker"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/fs"
	"github.com/sediment-io/sediment/objectstore/s3"
	"github.com/sediment-io/sediment/tiering"
)

// Tiered-storage settings of `sediment broker` (flags, YAML keys and
// SEDIMENT_… variables like the others).
func init() {
	brokerSettings = append(brokerSettings,
		brokerSetting{"tiering", true, "tiered storage: upload sealed segments of topics with remote.storage.enable=true to the bucket"},
		brokerSetting{"bucket-dir", "", "the bucket as a local folder (default DATA-DIR/bucket) when no s3-bucket is set"},
		brokerSetting{"s3-bucket", "", "an S3 bucket for tiered storage (instead of bucket-dir)"},
		brokerSetting{"s3-endpoint", "", "S3 endpoint URL (MinIO: http://host:9000); empty: AWS"},
		brokerSetting{"s3-region", "", "S3 region"},
		brokerSetting{"s3-prefix", "", "key prefix inside the S3 bucket"},
		brokerSetting{"s3-path-style", false, "path-style S3 addressing (MinIO)"},
		brokerSetting{"tier-cache-dir", "", "remote-read chunk cache folder (default DATA-DIR/tier-cache)"},
		brokerSetting{"tier-cache-bytes", int64(1 << 30), "remote-read chunk cache size"},
		brokerSetting{"tier-orphan-grace", time.Hour, "bucket objects no manifest references are deleted once this old"},
		brokerSetting{"tier-clean-interval", 10 * time.Minute, "how often a partition's leader looks for orphans in the bucket"},
		brokerSetting{"remote-fetch-max-wait", 500 * time.Millisecond, "how long a fetch waits for its reads from the bucket before it answers those partitions without records (the reads go on)"},
		brokerSetting{"remote-fetch-timeout", 10 * time.Second, "how long a read from the bucket may take before the fetch gets KAFKA_STORAGE_ERROR"},
	)
}

// openBucket opens the configured bucket; log, if set, gets a line per
// retried S3 request (a bucket that hangs said nothing for minutes).
func openBucket(ctx context.Context, v *viper.Viper, dataDir string, log *slog.Logger) (objectstore.Store, error) {
	if b := v.GetString("s3-bucket"); b != "" {
		return s3.New(ctx, s3.Config{Bucket: b, Endpoint: v.GetString("s3-endpoint"), Region: v.GetString("s3-region"),
			Prefix: v.GetString("s3-prefix"), PathStyle: v.GetBool("s3-path-style"), Logger: log})
	}
	dir := v.GetString("bucket-dir")
	if dir == "" {
		dir = filepath.Join(dataDir, "bucket")
	}
	return fs.New(dir)
}

// tieringConfig opens the bucket and returns the broker's tiered storage
// settings (nil, nil without tiering), for broker.Config.Tiering: the
// broker enables them before it serves (a restarted broker that served
// before answered its tiered partitions as local-only for a moment). The
// caller closes the store once the broker is closed.
func tieringConfig(ctx context.Context, v *viper.Viper, dataDir string, log *slog.Logger) (*broker.TieringConfig, error) {
	if !v.GetBool("tiering") {
		return nil, nil
	}
	store, err := openBucket(ctx, v, dataDir, log.With("part", "s3"))
	if err != nil {
		return nil, fmt.Errorf("bucket: %w", err)
	}
	return &broker.TieringConfig{Store: store,
		RemoteFetchMaxWait: v.GetDuration("remote-fetch-max-wait"), RemoteFetchTimeout: v.GetDuration("remote-fetch-timeout"),
		Options: tiering.Options{
			CacheDir: v.GetString("tier-cache-dir"), CacheBytes: v.GetInt64("tier-cache-bytes"), Logger: log.With("part", "tiering"),
			OrphanGrace: v.GetDuration("tier-orphan-grace"), CleanInterval: v.GetDuration("tier-clean-interval")}}, nil
}

// checkBucketAccess asks the bucket for one object at start, in the
// background: credentials or a policy it refuses are an ERROR now rather
// than the first failed upload round's (the broker starts either way, as
// Kafka's does with a remote storage it cannot reach).
func checkBucketAccess(ctx context.Context, store objectstore.Store, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := store.Head(ctx, "sediment-access-check")
	if errors.Is(err, objectstore.ErrAccessDenied) {
		log.Error("tiering: the bucket denies access (check the credentials and the bucket policy); nothing is uploaded or read from it until that is fixed", "err", err)
	}
}

func newTierCmd() *cobra.Command {
	v := viper.New()
	cmd := &cobra.Command{Use: "tier", Short: "Tiered storage tools"}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the topics and partitions in a bucket, from the bucket alone",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			if v.GetString("s3-bucket") == "" {
				// A listing creates nothing: fs.New would make the
				// folder (and print an empty bucket).
				dir := v.GetString("bucket-dir")
				if dir == "" {
					dir = filepath.Join(v.GetString("data-dir"), "bucket")
				}
				if _, err := os.Stat(dir); err != nil {
					return fmt.Errorf("no bucket folder at %s (set --bucket-dir, --data-dir or --s3-bucket): %w", dir, err)
				}
			}
			store, err := openBucket(ctx, v, v.GetString("data-dir"), nil)
			if err != nil {
				return err
			}
			defer store.Close()
			parts, err := tiering.InspectBucket(ctx, store)
			if err != nil {
				return err
			}
			tw := newTable(os.Stdout)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tTOPIC-ID\tREMOTE-START\tREMOTE-END\tSEGMENTS\tSEGMENT-BYTES\tOBJECTS\tMANIFEST-VERSION")
			for _, p := range parts {
				start, end, segs, bytes, version := int64(-1), int64(-1), 0, int64(0), int64(0)
				if m := p.Manifest; m != nil {
					start, end, segs, bytes, version = m.StartOffset, m.EndOffset, len(m.Segments), m.Size(), m.Version
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Descriptor.Topic, p.Descriptor.Partition,
					p.Descriptor.TopicID, start, end, segs, bytes, p.Objects, version)
			}
			return tw.Flush()
		},
	}
	f := ls.Flags()
	f.String("data-dir", "./data", "broker data directory (the default bucket folder is DATA-DIR/bucket)")
	f.String("bucket-dir", "", "the bucket as a local folder")
	f.String("s3-bucket", "", "an S3 bucket")
	f.String("s3-endpoint", "", "S3 endpoint URL")
	f.String("s3-region", "", "S3 region")
	f.String("s3-prefix", "", "key prefix inside the S3 bucket")
	f.Bool("s3-path-style", false, "path-style S3 addressing (MinIO)")
	v.SetEnvPrefix("SEDIMENT")
	v.AutomaticEnv()
	if err := v.BindPFlags(f); err != nil {
		panic(err)
	}
	cmd.AddCommand(ls, newTierStatusCmd())
	return cmd
}

// newTierStatusCmd asks running brokers' admin endpoints (GET
// /v1/tier/status) for their partitions' two tiers and prints one row per
// partition, from its leader when a broker asked leads it.
func newTierStatusCmd() *cobra.Command {
	v := viper.New()
	cmd := &cobra.Command{
		Use:   "status [TOPIC]",
		Short: "Show each partition's local and remote offsets, bytes per tier and upload lag, from running brokers",
		Example: `  sediment tier status
  sediment tier status orders --admin-address 10.0.0.1:9644,10.0.0.2:9644,10.0.0.3:9644
  sediment tier status orders -o json
  sediment tier status --internal`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := ""
			if len(args) == 1 {
				topic = args[0]
			}
			if err := checkTimeout(v); err != nil {
				return err
			}
			format := v.GetString("output")
			if format != "table" && format != "json" {
				return fmt.Errorf("--output %q: want table or json", format)
			}
			rows, err := tierStatus(cmd.Context(), cmd.ErrOrStderr(), v.GetStringSlice("admin-address"), topic, v.GetDuration("timeout"))
			if err != nil {
				return err
			}
			if topic == "" && !v.GetBool("internal") {
				rows = slices.DeleteFunc(rows, func(r tierStatusRow) bool { return isInternalTopic(r.Topic) })
			}
			if topic != "" && len(rows) == 0 {
				return fmt.Errorf("topic %q: no partition of it on the brokers asked", topic)
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			return printTierStatus(cmd.OutOrStdout(), rows)
		},
	}
	f := cmd.Flags()
	f.StringSlice("admin-address", []string{"127.0.0.1:9644"}, "admin addresses (host:port, the brokers' --admin-address) to ask, comma-separated; list every broker of a cluster")
	// --admin, the flag's first name, is still taken, as is SEDIMENT_ADMIN
	// (after SEDIMENT_ADMIN_ADDRESS, the broker's own variable).
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "admin" {
			name = "admin-address"
		}
		return pflag.NormalizedName(name)
	})
	f.StringP("output", "o", "table", "table or json")
	f.Duration("timeout", 30*time.Second, "how long to wait for each broker")
	f.Bool("internal", false, "with no TOPIC, include internal topics (__consumer_offsets, __transaction_state)")
	v.SetEnvPrefix("SEDIMENT")
	v.AutomaticEnv()
	if err := v.BindPFlags(f); err != nil {
		panic(err)
	}
	if err := v.BindEnv("admin-address", "SEDIMENT_ADMIN_ADDRESS", "SEDIMENT_ADMIN"); err != nil {
		panic(err)
	}
	return cmd
}

// isInternalTopic: the coordinators' topics, which the listings leave out
// unless asked (--internal).
func isInternalTopic(name string) bool {
	return name == "__consumer_offsets" || name == "__transaction_state"
}

// tierStatusRow is a partition's row: the status from the broker that
// reported it (its leader when one of the brokers asked leads it).
type tierStatusRow struct {
	broker.TierPartitionStatus
	NodeID int32 `json:"node_id"` // the broker that reported the row
}

// tierStatus gathers the rows of every admin address, one per partition,
// asking them all at once, each within timeout. An address that does not
// answer (refused, timed out, an error status or a body that is not a
// TierStatus) is noted on stderr and left out; it fails only when none
// answers.
func tierStatus(ctx context.Context, stderr io.Writer, addrs []string, topic string, timeout time.Duration) ([]tierStatusRow, error) {
	type key struct {
		topic     string
		partition int32
	}
	var list []string // the environment's value comes as one string
	for _, a := range addrs {
		for a := range strings.SplitSeq(a, ",") {
			if a = strings.TrimSpace(a); a != "" {
				list = append(list, a)
			}
		}
	}
	urls := make([]string, len(list))
	for i, addr := range list {
		u := url.URL{Scheme: "http", Host: addr, Path: "/v1/tier/status"}
		if strings.Contains(addr, "://") {
			parsed, err := url.Parse(addr)
			if err != nil {
				return nil, fmt.Errorf("--admin-address %q: %w", addr, err)
			}
			u.Scheme, u.Host = parsed.Scheme, parsed.Host
		}
		if topic != "" {
			u.RawQuery = url.Values{"topic": {topic}}.Encode()
		}
		urls[i] = u.String()
	}
	if len(urls) == 0 {
		return nil, errors.New("no admin address to ask (set --admin-address or SEDIMENT_ADMIN_ADDRESS)")
	}
	answers := make([]broker.TierStatus, len(urls))
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i := range urls {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			answers[i], errs[i] = getTierStatus(rctx, list[i], urls[i])
		})
	}
	wg.Wait()
	best := map[key]tierStatusRow{}
	enabled := false
	answered := 0
	for i, st := range answers {
		if errs[i] != nil {
			continue
		}
		answered++
		enabled = enabled || st.Tiering
		for _, p := range st.Partitions {
			k := key{p.Topic, p.Partition}
			if old, ok := best[k]; ok && (old.Leader || !p.Leader) {
				continue
			}
			best[k] = tierStatusRow{TierPartitionStatus: p, NodeID: st.NodeID}
		}
	}
	if answered == 0 {
		if len(urls) == 1 {
			return nil, fmt.Errorf("%w (set --admin-address or SEDIMENT_ADMIN_ADDRESS)", errs[0])
		}
		return nil, fmt.Errorf("no admin endpoint answered (set --admin-address or SEDIMENT_ADMIN_ADDRESS):\n%w", errors.Join(errs...))
	}
	for _, err := range errs {
		if err != nil {
			// The rows of the partitions such a broker leads come from
			// a follower that answered (LEADER -), or are missing.
			fmt.Fprintf(stderr, "warning: %v; showing the %d of %d brokers that answered\n", err, answered, len(urls))
		}
	}
	if !enabled {
		return nil, errors.New("tiered storage is not enabled on the brokers asked (sediment broker --tiering)")
	}
	rows := make([]tierStatusRow, 0, len(best))
	for _, r := range best {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b tierStatusRow) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return rows, nil
}

// getTierStatus is the GET /v1/tier/status (u) of the admin endpoint at
// addr.
func getTierStatus(ctx context.Context, addr, u string) (broker.TierStatus, error) {
	var st broker.TierStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("cannot reach the admin endpoint at %s: %w", addr, err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	if err == nil {
		err = json.Unmarshal(body, &st)
	}
	if err != nil {
		return st, fmt.Errorf("admin endpoint %s: %w", u, err)
	}
	return st, nil
}

func printTierStatus(w io.Writer, rows []tierStatusRow) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tLEADER\tREMOTE-STORAGE\tLOCAL-START\tLOCAL-END\tLOCAL-BYTES\tREMOTE-START\tREMOTE-END\tREMOTE-BYTES\tLAG-OFFSETS\tLAG-BYTES\tERROR")
	for _, r := range rows {
		leader, enabled, errText := "-", "off", "-"
		if r.Leader {
			leader = fmt.Sprint(r.NodeID)
		}
		if r.RemoteStorageEnable {
			enabled = "on"
		}
		if r.LastError != "" {
			errText = r.LastError
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Topic, r.Partition, leader, enabled,
			r.LocalStartOffset, r.LocalEndOffset, r.LocalBytes, r.RemoteStartOffset, r.RemoteEndOffset, r.RemoteBytes,
			r.UploadLagOffsets, r.UploadLagBytes, errText)
	}
	return tw.Flush()
}
