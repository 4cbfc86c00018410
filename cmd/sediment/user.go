package main

// sediment user set|delete|list: SASL users through kadm
// (AlterUserScramCredentials, DescribeUserScramCredentials, KIP-554), as
// kafka-configs.sh --entity-type users --alter --add-config 'SCRAM-SHA-256=…'
// does.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func newUserCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Create, change, delete and list SASL users (SCRAM credentials)",
	}
	opts := addClientFlags(cmd)
	cmd.AddCommand(newUserSetCmd(opts), newUserDeleteCmd(opts), newUserListCmd(opts))
	return cmd
}

func parseMechanisms(list []string) ([]kadm.ScramMechanism, error) {
	var out []kadm.ScramMechanism
	for _, m := range list {
		switch strings.ToUpper(strings.TrimSpace(m)) {
		case "SCRAM-SHA-256":
			out = append(out, kadm.ScramSha256)
		case "SCRAM-SHA-512":
			out = append(out, kadm.ScramSha512)
		default:
			return nil, fmt.Errorf("--mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", m)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--mechanism: none given")
	}
	return out, nil
}

func newUserSetCmd(opts *clientOptions) *cobra.Command {
	var (
		password      string
		passwordStdin bool
		mechanisms    []string
		iterations    int32
	)
	cmd := &cobra.Command{
		Use:   "set USER",
		Short: "Create a user or change its password (a SCRAM credential per mechanism; PLAIN logins check against them)",
		Example: `  sediment user set alice --password-stdin <<< "$ALICE_PASSWORD"
  sediment user set svc-orders --password s3cret --mechanism SCRAM-SHA-512`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if passwordStdin {
				line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("reading the password: %w", err)
				}
				password = strings.TrimRight(line, "\r\n")
			}
			if password == "" {
				return errors.New("no password: give --password or --password-stdin")
			}
			mechs, err := parseMechanisms(mechanisms)
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
			var ups []kadm.UpsertSCRAM
			for _, m := range mechs {
				ups = append(ups, kadm.UpsertSCRAM{User: args[0], Mechanism: m, Iterations: iterations, Password: password})
			}
			res, err := adm.AlterUserSCRAMs(ctx, nil, ups)
			if err != nil {
				return fmt.Errorf("set user: %w", err)
			}
			if err := scramResultErr(res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s set (%s)\n", args[0], strings.ToUpper(strings.Join(mechanisms, ", ")))
			return nil
		},
	}
	cmd.Flags().StringVar(&password, "password", "", "the password (visible in the process list; prefer --password-stdin)")
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of stdin")
	cmd.Flags().StringSliceVar(&mechanisms, "mechanism", []string{"SCRAM-SHA-256", "SCRAM-SHA-512"}, "SCRAM mechanisms to set a credential for")
	cmd.Flags().Int32Var(&iterations, "iterations", 8192, "PBKDF2 iterations (4096-16384)")
	return cmd
}

func newUserDeleteCmd(opts *clientOptions) *cobra.Command {
	var mechanisms []string
	cmd := &cobra.Command{
		Use:     "delete USER",
		Short:   "Delete a user's SCRAM credentials (all of them by default)",
		Example: `  sediment user delete alice`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			var mechs []kadm.ScramMechanism
			if len(mechanisms) > 0 {
				if mechs, err = parseMechanisms(mechanisms); err != nil {
					return err
				}
			} else {
				d, err := adm.DescribeUserSCRAMs(ctx, args[0])
				if err != nil {
					return fmt.Errorf("describe user: %w", err)
				}
				u := d[args[0]]
				if u.Err != nil {
					return fmt.Errorf("user %s: %w", args[0], u.Err)
				}
				for _, ci := range u.CredInfos {
					mechs = append(mechs, ci.Mechanism)
				}
			}
			var dels []kadm.DeleteSCRAM
			for _, m := range mechs {
				dels = append(dels, kadm.DeleteSCRAM{User: args[0], Mechanism: m})
			}
			res, err := adm.AlterUserSCRAMs(ctx, dels, nil)
			if err != nil {
				return fmt.Errorf("delete user: %w", err)
			}
			if err := scramResultErr(res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s deleted\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&mechanisms, "mechanism", nil, "only these mechanisms' credentials")
	return cmd
}

func newUserListCmd(opts *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list [USER...]",
		Short: "List users with their SCRAM mechanisms and iterations",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext(cmd)
			defer cancel()
			adm, err := opts.newAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			d, err := adm.DescribeUserSCRAMs(ctx, args...)
			if err != nil {
				return fmt.Errorf("describe users: %w", err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "USER\tMECHANISMS")
			var errs []error
			for _, u := range d.Sorted() {
				if u.Err != nil {
					errs = append(errs, fmt.Errorf("user %s: %w", u.User, u.Err))
					continue
				}
				var ms []string
				for _, ci := range u.CredInfos {
					ms = append(ms, fmt.Sprintf("%s (%d iterations)", ci.Mechanism, ci.Iterations))
				}
				fmt.Fprintf(tw, "%s\t%s\n", u.User, strings.Join(ms, ", "))
			}
			tw.Flush()
			return errors.Join(errs...)
		},
	}
}

// scramResultErr joins the per-user errors of AlterUserSCRAMs.
func scramResultErr(res kadm.AlteredUserSCRAMs) error {
	var errs []error
	for _, r := range res.Sorted() {
		if r.Err != nil {
			msg := r.Err.Error()
			if r.ErrMessage != "" {
				msg += ": " + r.ErrMessage
			}
			errs = append(errs, fmt.Errorf("user %s: %s", r.User, msg))
		}
	}
	return errors.Join(errs...)
}
