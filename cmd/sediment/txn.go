package main

// sediment txn list|describe|abort: transactions through kadm
// (ListTransactions, DescribeTransactions, DescribeProducers and
// WriteTxnMarkers, as kafka-transactions.sh uses them).

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func newTxnCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "List, describe and abort transactions",
	}
	opts := addClientFlags(cmd)
	cmd.AddCommand(newTxnListCmd(opts), newTxnDescribeCmd(opts), newTxnAbortCmd(opts))
	return cmd
}

func newTxnListCmd(opts *clientOptions) *cobra.Command {
	var (
		states  []string
		minAge  time.Duration
		pattern string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List transactional ids with their state, producer, age and partitions",
		Example: `  sediment txn list
  sediment txn list --state Ongoing --min-age 1m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			want, err := txnStates(states)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			listed, err := adm.ListTransactions(ctx, nil, want)
			if err != nil {
				return fmt.Errorf("list transactions: %w", err)
			}
			var ids []string
			for _, l := range listed.Sorted() {
				if pattern == "" || strings.Contains(l.TxnID, pattern) {
					ids = append(ids, l.TxnID)
				}
			}
			if len(ids) == 0 {
				return printTxns(cmd.OutOrStdout(), nil, minAge, time.Now())
			}
			described, err := adm.DescribeTransactions(ctx, ids...)
			if err != nil {
				return fmt.Errorf("describe transactions: %w", err)
			}
			return printTxns(cmd.OutOrStdout(), described.Sorted(), minAge, time.Now())
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only these states ("+strings.Join(txnStateNames, ", ")+")")
	cmd.Flags().DurationVar(&minAge, "min-age", 0, "only transactions open at least this long")
	cmd.Flags().StringVar(&pattern, "match", "", "only transactional ids containing this")
	return cmd
}

// txnStateNames are Kafka's transaction states, as ListTransactions names
// them (the coordinator's TransactionState).
var txnStateNames = []string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "PrepareEpochFence", "Dead"}

// txnStates checks --state values against Kafka's state names, in any case,
// and returns them as Kafka spells them: a broker matches names exactly and
// lists nothing for one it does not know, so a typo listed nothing, silently.
func txnStates(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, s := range in {
		i := slices.IndexFunc(txnStateNames, func(n string) bool { return strings.EqualFold(n, s) })
		if i < 0 {
			return nil, fmt.Errorf("unknown --state %q (want one of %s)", s, strings.Join(txnStateNames, ", "))
		}
		out = append(out, txnStateNames[i])
	}
	return out, nil
}

func newTxnDescribeCmd(opts *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "describe TRANSACTIONAL-ID...",
		Short:   "Describe transactional ids",
		Example: `  sediment txn describe orders-copier-0`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			described, err := adm.DescribeTransactions(ctx, ids...)
			if err != nil && len(described) == 0 {
				return fmt.Errorf("describe transactions: %w", err)
			}
			var failed []error
			for _, d := range described.Sorted() {
				if d.Err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", d.TxnID, kafkaError(d.Err, "")))
				}
			}
			if err := printTxns(cmd.OutOrStdout(), described.Sorted(), 0, time.Now()); err != nil {
				return err
			}
			return errors.Join(failed...)
		},
	}
}

// printTxns prints one line per transaction; with minAge only those open
// at least that long.
func printTxns(w io.Writer, txns []kadm.DescribedTransaction, minAge time.Duration, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TRANSACTIONAL ID\tSTATE\tPRODUCER ID\tEPOCH\tTIMEOUT\tAGE\tPARTITIONS")
	for _, d := range txns {
		if d.Err != nil {
			continue
		}
		age := "-"
		if d.StartTimestamp >= 0 {
			a := now.Sub(time.UnixMilli(d.StartTimestamp)).Truncate(time.Millisecond)
			if a < minAge {
				continue
			}
			age = a.String()
		} else if minAge > 0 {
			continue
		}
		var parts []string
		for topic, ps := range d.Topics {
			for p := range ps {
				parts = append(parts, fmt.Sprintf("%s/%d", topic, p))
			}
		}
		sort.Strings(parts)
		ps := "-"
		if len(parts) > 0 {
			ps = strings.Join(parts, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", d.TxnID, d.State, d.ProducerID, d.ProducerEpoch,
			(time.Duration(d.TimeoutMillis) * time.Millisecond).String(), age, ps)
	}
	return tw.Flush()
}

func newTxnAbortCmd(opts *clientOptions) *cobra.Command {
	var (
		topic      string
		partition  int32
		producerID int64
	)
	cmd := &cobra.Command{
		Use:   "abort --topic T --partition P [--producer-id ID]",
		Short: "Abort a hanging transaction in a partition",
		Long: `Abort finds the producers with an open transaction in the partition
(DescribeProducers) and writes an abort marker for each (or only for
--producer-id) with WriteTxnMarkers, as kafka-transactions.sh abort does.
Use it for a transaction that its coordinator no longer tracks; an open
transaction that the coordinator knows is aborted by transaction.timeout.ms.`,
		Example: `  sediment txn abort --topic orders --partition 3`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			set := kadm.TopicsSet{topic: {partition: {}}}
			ds, err := adm.DescribeProducers(ctx, set)
			if err != nil {
				return fmt.Errorf("describe producers: %w", err)
			}
			dp, ok := ds[topic].Partitions[partition]
			if !ok {
				return fmt.Errorf("%s/%d: no such partition", topic, partition)
			}
			if dp.Err != nil {
				return fmt.Errorf("%s/%d: %w", topic, partition, kafkaError(dp.Err, ""))
			}
			n := 0
			for _, p := range dp.ActiveProducers.Sorted() {
				if p.CurrentTxnStartOffset < 0 || (producerID >= 0 && p.ProducerID != producerID) {
					continue
				}
				// At the coordinator epoch of the producer's last marker
				// (0 if it had none), as kafka-transactions.sh does: an
				// older one is fenced.
				res, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: p.ProducerID, ProducerEpoch: p.ProducerEpoch, CoordinatorEpoch: max(p.CoordinatorEpoch, 0), Topics: set})
				if err != nil {
					return fmt.Errorf("write abort marker: %w", err)
				}
				var perr error
				for _, r := range res {
					r.Topics.EachPartition(func(pr kadm.TxnMarkersPartitionResponse) {
						if pr.Err != nil {
							perr = pr.Err
						}
					})
				}
				if perr != nil {
					return fmt.Errorf("abort producer %d: %w", p.ProducerID, kafkaError(perr, ""))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "aborted the transaction of producer %d (epoch %d) from offset %d in %s/%d\n",
					p.ProducerID, p.ProducerEpoch, p.CurrentTxnStartOffset, topic, partition)
				n++
			}
			if n == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no open transaction in %s/%d\n", topic, partition)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "topic of the hanging transaction")
	cmd.Flags().Int32Var(&partition, "partition", 0, "partition of the hanging transaction")
	cmd.Flags().Int64Var(&producerID, "producer-id", -1, "abort only this producer's transaction")
	cmd.MarkFlagRequired("topic")
	return cmd
}
