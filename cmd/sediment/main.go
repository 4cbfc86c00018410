// Command sediment is the one Sediment binary: broker, admin and tools.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sediment:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "sediment",
		Short:         "Sediment: a Kafka-compatible log with history on object storage",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newBrokerCmd())
	root.AddCommand(newTopicCmd())
	root.AddCommand(newClusterCmd())
	root.AddCommand(newProduceCmd())
	root.AddCommand(newConsumeCmd())
	root.AddCommand(newGroupCmd())
	root.AddCommand(newTxnCmd())
	root.AddCommand(newTierCmd())
	root.AddCommand(newQuotaCmd())
	root.AddCommand(newTokenCmd())
	root.AddCommand(newUserCmd())
	root.AddCommand(newACLCmd())
	root.AddCommand(newHealthCmd())
	return root
}
