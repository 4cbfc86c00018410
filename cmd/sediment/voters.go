package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// parseVoters parses the voters setting: comma-separated id@host:port
// (Kafka's controller.quorum.voters form).
func parseVoters(s string) ([]metadata.Peer, error) {
	var out []metadata.Peer
	seen := map[int32]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		idStr, addr, ok := strings.Cut(part, "@")
		id, err := strconv.ParseInt(idStr, 10, 32)
		if !ok || err != nil || id < 0 {
			return nil, fmt.Errorf("voters: %q is not id@host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("voters: %q: %w", part, err)
		}
		if seen[int32(id)] {
			return nil, fmt.Errorf("voters: id %d twice", id)
		}
		seen[int32(id)] = true
		out = append(out, metadata.Peer{ID: int32(id), Addr: addr})
	}
	return out, nil
}

// newClusterVotersCmd is `sediment cluster voters list|add|remove`: the
// metadata quorum's voters through the Kafka protocol, as
// kafka-metadata-quorum.sh does (DescribeQuorum, AddRaftVoter,
// RemoveRaftVoter). Any broker takes the change and forwards it to the Raft
// leader; the command returns once the new voter set is committed.
func newClusterVotersCmd(opts *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "voters",
		Short: "List, add or remove the metadata quorum's voters",
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Short:   "List the voters, their Raft addresses, the leader, the term and the commit index",
		Example: "  sediment cluster voters list -b localhost:9092",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				q, err := describeQuorum(ctx, cl)
				if err != nil {
					return err
				}
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "VOTER\tRAFT-ADDRESS\tLEADER")
				for _, v := range q.voters {
					fmt.Fprintf(tw, "%d\t%s\t%v\n", v.ID, v.Addr, v.ID == q.leader)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "\nobservers: %v\nterm %d, commit index %d\n", q.observers, q.term, q.commitIndex)
				return err
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "add ID HOST:PORT",
		Short: "Add a voter: the node with this id, listening for Raft at HOST:PORT",
		Long: `Add a voter to the metadata quorum. Start the new broker first with --voters set to the
current voters (its own id not among them): it joins as an observer instead of bootstrapping
(it receives the metadata log, votes in nothing, and serves as a broker). This command makes
it a voter; an observer is already caught up, another node catches up from the leader's log
or a snapshot. The node must answer at HOST:PORT as node ID.`,
		Example: "  sediment cluster voters add 4 10.0.0.4:9093 -b localhost:9092",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseVoterID(args[0])
			if err != nil {
				return err
			}
			host, portStr, err := net.SplitHostPort(args[1])
			port, perr := strconv.ParseUint(portStr, 10, 16)
			if err != nil || perr != nil || host == "" || port == 0 {
				return fmt.Errorf("voters add: %q is not host:port", args[1])
			}
			return withClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				req := kmsg.NewPtrAddRaftVoterRequest()
				req.VoterID = id
				req.TimeoutMillis = int32(min(opts.timeout(), time.Duration(math.MaxInt32)*time.Millisecond) / time.Millisecond)
				l := kmsg.NewAddRaftVoterRequestListener()
				l.Name, l.Host, l.Port = "RAFT", host, uint16(port)
				req.Listeners = append(req.Listeners, l)
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					return fmt.Errorf("AddRaftVoter: %w", err)
				}
				if err := responseError(resp.ErrorCode, resp.ErrorMessage); err != nil {
					return fmt.Errorf("AddRaftVoter: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "added voter %d at %s\n", id, args[1])
				return nil
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "remove ID",
		Short: "Remove a voter",
		Long: `Remove a voter from the metadata quorum. A removed node that still runs stays an observer:
it receives the metadata log and votes in nothing, and the broker goes on serving (decommission
it with "sediment cluster unregister" once it is stopped). One that does not answer leaves the
quorum's configuration. Removing the leader makes it step down.`,
		Example: "  sediment cluster voters remove 3 -b localhost:9092",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseVoterID(args[0])
			if err != nil {
				return err
			}
			return withClient(cmd, opts, func(ctx context.Context, cl *kgo.Client) error {
				req := kmsg.NewPtrRemoveRaftVoterRequest()
				req.VoterID = id
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					return fmt.Errorf("RemoveRaftVoter: %w", err)
				}
				if err := responseError(resp.ErrorCode, resp.ErrorMessage); err != nil {
					return fmt.Errorf("RemoveRaftVoter: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed voter %d\n", id)
				return nil
			})
		},
	})
	return cmd
}

func parseVoterID(s string) (int32, error) {
	id, err := strconv.ParseInt(s, 10, 32)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("voter id %q is not a non-negative integer", s)
	}
	return int32(id), nil
}

// responseError is a response's error code as an error, with the message
// the broker sent beside it, if any.
func responseError(code int16, msg *string) error {
	err := kerr.ErrorForCode(code)
	if err != nil && msg != nil && *msg != "" {
		// "CODE: the broker's message", without kerr's generic
		// description of the code in between.
		return kafkaError(err, *msg)
	}
	return err
}

// withClient runs f with a client for the command's brokers and its timeout.
func withClient(cmd *cobra.Command, opts *clientOptions, f func(context.Context, *kgo.Client) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), opts.timeout())
	defer cancel()
	cl, err := opts.newClient(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	return f(ctx, cl)
}

// quorum is what DescribeQuorum says of __cluster_metadata-0.
type quorum struct {
	leader      int32
	term        int32           // the leader epoch: the Raft term
	commitIndex int64           // the high watermark: the Raft commit index
	voters      []metadata.Peer // Addr from v2's nodes, "" when not given
	observers   []int32         // brokers that receive the log without a vote
}

func describeQuorum(ctx context.Context, cl *kgo.Client) (quorum, error) {
	q := quorum{leader: -1}
	req := kmsg.NewPtrDescribeQuorumRequest()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic = "__cluster_metadata"
	t.Partitions = append(t.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return q, fmt.Errorf("DescribeQuorum: %w", err)
	}
	if err := responseError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return q, fmt.Errorf("DescribeQuorum: %w", err)
	}
	addrs := map[int32]string{}
	for _, n := range resp.Nodes {
		if len(n.Listeners) > 0 {
			addrs[n.NodeID] = net.JoinHostPort(n.Listeners[0].Host, strconv.Itoa(int(n.Listeners[0].Port)))
		}
	}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if err := responseError(p.ErrorCode, p.ErrorMessage); err != nil {
				return q, fmt.Errorf("DescribeQuorum: %w", err)
			}
			q.leader, q.term, q.commitIndex = p.LeaderID, p.LeaderEpoch, p.HighWatermark
			for _, v := range p.CurrentVoters {
				q.voters = append(q.voters, metadata.Peer{ID: v.ReplicaID, Addr: addrs[v.ReplicaID]})
			}
			for _, o := range p.Observers {
				q.observers = append(q.observers, o.ReplicaID)
			}
		}
	}
	return q, nil
}
