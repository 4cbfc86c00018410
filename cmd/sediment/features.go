package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// newClusterFeaturesCmd is `sediment cluster features`: the cluster's
// feature levels (KIP-584), as kafka-features.sh shows and changes them:
// describe reads ApiVersions, the others send UpdateFeatures.
func newClusterFeaturesCmd(opts *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "features",
		Short: "Describe, upgrade, downgrade or disable the cluster's feature levels (transaction.version, group.version)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "describe",
		Short:   "List the features a broker supports and the levels finalized in the cluster",
		Example: "  sediment cluster features describe -b localhost:9092",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				req := kmsg.NewPtrApiVersionsRequest()
				req.Version = 4
				req.ClientSoftwareName, req.ClientSoftwareVersion = "sediment-cli", "1"
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					return fmt.Errorf("ApiVersions: %w", err)
				}
				if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
					return fmt.Errorf("ApiVersions: %w", err)
				}
				finalized := map[string]int16{}
				for _, f := range resp.FinalizedFeatures {
					finalized[f.Name] = f.MaxVersionLevel
				}
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "FEATURE\tSUPPORTED-MIN\tSUPPORTED-MAX\tFINALIZED\tEPOCH")
				for _, f := range resp.SupportedFeatures {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", f.Name, f.MinVersion, f.MaxVersion, finalized[f.Name], resp.FinalizedFeaturesEpoch)
				}
				return tw.Flush()
			})
		},
	})
	cmd.AddCommand(newFeatureUpdateCmd(opts, "upgrade", "Raise features to the given levels", 1),
		newFeatureUpdateCmd(opts, "downgrade", "Lower features to the given levels (--unsafe: a downgrade that may lose metadata)", 2),
		newFeatureUpdateCmd(opts, "disable", "Take features out of use (level 0)", 2))
	return cmd
}

// newFeatureUpdateCmd is upgrade, downgrade or disable: UpdateFeatures with
// upgradeType 1 (upgrade) or 2 (safe downgrade; 3 with --unsafe).
func newFeatureUpdateCmd(opts *clientOptions, use, short string, upgradeType int8) *cobra.Command {
	var features []string
	var dryRun, unsafe bool
	example := fmt.Sprintf("  sediment cluster features %s --feature transaction.version=1", use)
	if use == "disable" {
		example = "  sediment cluster features disable --feature group.version"
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			updates, err := parseFeatureUpdates(features, use == "disable")
			if err != nil {
				return err
			}
			t := upgradeType
			if unsafe {
				t = 3
			}
			req := kmsg.NewPtrUpdateFeaturesRequest()
			req.ValidateOnly = dryRun
			req.TimeoutMillis = int32(opts.timeout().Milliseconds())
			for _, u := range updates {
				fu := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
				fu.Feature, fu.MaxVersionLevel, fu.UpgradeType, fu.AllowDowngrade = u.name, u.level, t, t > 1
				req.FeatureUpdates = append(req.FeatureUpdates, fu)
			}
			return withClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					return fmt.Errorf("UpdateFeatures: %w", err)
				}
				if err := responseError(resp.ErrorCode, resp.ErrorMessage); err != nil {
					return fmt.Errorf("UpdateFeatures: %w", err)
				}
				verb := "set"
				if dryRun {
					verb = "would be set (dry run)"
				}
				for _, u := range updates {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s to level %d\n", u.name, verb, u.level)
				}
				return nil
			})
		},
	}
	if use == "disable" {
		cmd.Flags().StringArrayVar(&features, "feature", nil, "a feature to disable (repeatable)")
	} else {
		cmd.Flags().StringArrayVar(&features, "feature", nil, "name=level (repeatable)")
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate only; change nothing")
	if upgradeType > 1 {
		cmd.Flags().BoolVar(&unsafe, "unsafe", false, "allow a downgrade that may lose metadata")
	}
	return cmd
}

type featureLevel struct {
	name  string
	level int16
}

// parseFeatureUpdates reads --feature values: name=level, or a bare name
// (level 0) when disabling.
func parseFeatureUpdates(in []string, disable bool) ([]featureLevel, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("no --feature given")
	}
	var out []featureLevel
	for _, s := range in {
		if disable {
			if s == "" || strings.Contains(s, "=") {
				return nil, fmt.Errorf("--feature %q: give a feature name", s)
			}
			out = append(out, featureLevel{name: s})
			continue
		}
		name, lv, ok := strings.Cut(s, "=")
		n, err := strconv.ParseInt(strings.TrimSpace(lv), 10, 16)
		if !ok || name == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("--feature %q: want name=level (a level from 0 to 32767)", s)
		}
		out = append(out, featureLevel{name: strings.TrimSpace(name), level: int16(n)})
	}
	return out, nil
}
