package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
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
	)
}

// openBucket opens the configured bucket.
func openBucket(ctx context.Context, v *viper.Viper, dataDir string) (objectstore.Store, error) {
	if b := v.GetString("s3-bucket"); b != "" {
		return s3.New(ctx, s3.Config{Bucket: b, Endpoint: v.GetString("s3-endpoint"), Region: v.GetString("s3-region"),
			Prefix: v.GetString("s3-prefix"), PathStyle: v.GetBool("s3-path-style")})
	}
	dir := v.GetString("bucket-dir")
	if dir == "" {
		dir = filepath.Join(dataDir, "bucket")
	}
	return fs.New(dir)
}

// enableTiering wires tiered storage into a started broker.
func enableTiering(ctx context.Context, b *broker.Broker, v *viper.Viper, cfg broker.Config, log *slog.Logger) (objectstore.Store, error) {
	if !v.GetBool("tiering") {
		return nil, nil
	}
	store, err := openBucket(ctx, v, cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("bucket: %w", err)
	}
	err = b.EnableTiering(broker.TieringConfig{Store: store, Options: tiering.Options{
		CacheDir: v.GetString("tier-cache-dir"), CacheBytes: v.GetInt64("tier-cache-bytes"), Logger: log.With("part", "tiering"),
		OrphanGrace: v.GetDuration("tier-orphan-grace"), CleanInterval: v.GetDuration("tier-clean-interval")}})
	if err != nil {
		store.Close()
		return nil, err
	}
	return store, nil
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
			store, err := openBucket(ctx, v, v.GetString("data-dir"))
			if err != nil {
				return err
			}
			defer store.Close()
			parts, err := tiering.InspectBucket(ctx, store)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
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
	cmd.AddCommand(ls)
	return cmd
}
