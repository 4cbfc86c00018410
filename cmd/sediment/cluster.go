package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect the cluster, its metadata voters, dynamic broker configs, feature levels and log levels",
	}
	opts := addClientFlags(cmd)
	cmd.AddCommand(newClusterStatusCmd(opts), newClusterVotersCmd(opts), newClusterConfigCmd(opts), newClusterFeaturesCmd(opts),
		newClusterUnregisterCmd(opts), newClusterLogLevelCmd(opts))
	return cmd
}

// newClusterUnregisterCmd removes a decommissioned broker's registration
// (UnregisterBroker, as kafka-cluster.sh unregister).
func newClusterUnregisterCmd(opts *clientOptions) *cobra.Command {
	var id int32
	cmd := &cobra.Command{
		Use:   "unregister --id N",
		Short: "Forget a broker that was shut down for good (UnregisterBroker)",
		Long: `Forget a broker that was shut down for good, as kafka-cluster.sh unregister does:
it no longer counts as registered (it blocks no feature upgrade, and Metadata and
DescribeCluster no longer list it). It is fenced first if it is not. Move its
replicas off it with "sediment topic reassign" before or after; remove it from the
metadata quorum with "sediment cluster voters remove" if it was a voter. A live
broker unregistered by mistake is out of the cluster until its next start.`,
		Example: `  sediment cluster unregister --id 3 -b localhost:9092`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("id") {
				return fmt.Errorf("--id is required")
			}
			return withClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				req := kmsg.NewPtrUnregisterBrokerRequest()
				req.BrokerID = id
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					return fmt.Errorf("UnregisterBroker: %w", err)
				}
				if err := responseError(resp.ErrorCode, resp.ErrorMessage); err != nil {
					return fmt.Errorf("UnregisterBroker: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "broker %d unregistered\n", id)
				return nil
			})
		},
	}
	cmd.Flags().Int32Var(&id, "id", -1, "the broker's node id")
	return cmd
}

// newClusterStatusCmd prints the brokers (registered, fenced, reachable),
// the metadata quorum's voters and its leader (the controller), and the
// number of under-replicated partitions.
func newClusterStatusCmd(opts *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "status",
		Short:   "Show brokers, their liveness, the metadata voters and the controller",
		Example: `  sediment cluster status -b localhost:9092,localhost:9093,localhost:9094`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), opts.timeout())
			defer cancel()
			cl, err := opts.newClient(ctx)
			if err != nil {
				return err
			}
			defer cl.Close()
			dc := kmsg.NewPtrDescribeClusterRequest()
			dc.IncludeFencedBrokers = true
			dc.EndpointType = 1
			cresp, err := dc.RequestWith(ctx, cl)
			if err != nil {
				return fmt.Errorf("DescribeCluster: %w", err)
			}
			if err := kerr.ErrorForCode(cresp.ErrorCode); err != nil {
				return fmt.Errorf("DescribeCluster: %w", err)
			}
			// A login without DESCRIBE on the cluster is refused
			// DescribeQuorum: say so rather than print a controller -1,
			// no voters and every broker a non-voter.
			q, err := describeQuorum(ctx, cl)
			if errors.Is(err, kerr.ClusterAuthorizationFailed) {
				return &brokerError{code: kerr.ClusterAuthorizationFailed,
					message: "cluster status needs DESCRIBE on the cluster to read the metadata quorum's voters and controller (DescribeQuorum refused)"}
			}
			if err != nil {
				return err
			}
			leader, observers := q.leader, q.observers
			var voters []int32
			for _, v := range q.voters {
				voters = append(voters, v.ID)
			}
			// Metadata lists only the topics this login may DESCRIBE.
			under := 0
			mresp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
			if err != nil {
				return fmt.Errorf("metadata: %w", err)
			}
			for _, t := range mresp.Topics {
				for _, p := range t.Partitions {
					if len(p.ISR) < len(p.Replicas) {
						under++
					}
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "cluster id: %s\ncontroller: %d\nvoters: %v\nobservers: %v\nunder-replicated partitions: %d\n\n", cresp.ClusterID, leader, voters, observers, under)
			tw := newTable(out)
			fmt.Fprintln(tw, "BROKER\tADDRESS\tSTATE\tREACHABLE\tVOTER")
			for _, b := range cresp.Brokers {
				addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
				state := "active"
				if b.IsFenced {
					state = "fenced"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%v\n", b.NodeID, addr, state, opts.reachable(ctx, addr), slices.Contains(voters, b.NodeID))
			}
			return tw.Flush()
		},
	}
}

// reachable reports whether the broker answers ApiVersions within a second
// (or three, with TLS or SASL), connecting as the other commands do.
func (o *clientOptions) reachable(ctx context.Context, addr string) bool {
	sec, err := o.securityOpts()
	if err != nil {
		return false
	}
	wait := time.Second
	if len(sec) > 0 {
		wait = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.DialTimeout(wait)}, sec...)...)
	if err != nil {
		return false
	}
	defer cl.Close()
	_, err = kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	return err == nil
}
