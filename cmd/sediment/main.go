// Command sediment is the one Sediment binary: broker, admin and tools.
package main

import (
	"fmt"
	"os"
	"strings"

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
	rejectUnknownSubcommands(root)
	// A group's usage shows only "sediment topic [command]", as before it
	// had an action (cobra's template with that one condition changed).
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	return root
}

// rejectUnknownSubcommands gives every command group under c (a command
// with subcommands and no action of its own, as `sediment topic`) the
// behaviour cobra gives the root: alone it prints its help (exit status 0),
// and with an argument that names none of its subcommands it fails with
// `unknown command "creat" for "sediment topic"` and cobra's suggestions.
// Cobra itself checks only the root: `sediment topic creat x` printed the
// help and exited 0.
func rejectUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		rejectUnknownSubcommands(sub)
	}
	if !c.HasParent() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommandError(cmd, args[0])
	}
}

// unknownCommandError is cobra's error for an unknown subcommand of the
// root, for any command group.
func unknownCommandError(cmd *cobra.Command, arg string) error {
	var suggest strings.Builder
	if !cmd.DisableSuggestions {
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2
		}
		if s := cmd.SuggestionsFor(arg); len(s) > 0 {
			suggest.WriteString("\n\nDid you mean this?\n")
			for _, name := range s {
				fmt.Fprintf(&suggest, "\t%s\n", name)
			}
		}
	}
	return fmt.Errorf("unknown command %q for %q%s", arg, cmd.CommandPath(), suggest.String())
}
