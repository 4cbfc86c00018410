package main

// sediment token create|describe|renew|expire: delegation tokens (KIP-48,
// KIP-373) through kadm, as kafka-delegation-tokens.sh does. The commands
// must log in with the owner's own credentials (SASL, or a TLS client
// certificate): brokers refuse the token APIs on PLAINTEXT and to token
// logins. A job then logs in as the token: --sasl-token with the token id
// as --sasl-username and its HMAC as --sasl-password.

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, describe, renew and expire delegation tokens (the brokers need --delegation-token-secret-key)",
	}
	opts := addClientFlags(cmd)
	cmd.AddCommand(newTokenCreateCmd(opts), newTokenDescribeCmd(opts), newTokenRenewCmd(opts), newTokenExpireCmd(opts))
	return cmd
}

// userPrincipal reads "alice" or "User:alice".
func userPrincipal(s string) kadm.Principal {
	if typ, name, ok := strings.Cut(s, ":"); ok && typ != "" {
		return kadm.Principal{Type: typ, Name: name}
	}
	return kadm.Principal{Type: "User", Name: s}
}

func principalString(p kadm.Principal) string {
	if p.Type == "" {
		p.Type = "User"
	}
	return p.Type + ":" + p.Name
}

func printTokens(cmd *cobra.Command, toks kadm.DelegationTokens) error {
	tw := newTable(cmd.OutOrStdout())
	fmt.Fprintln(tw, "TOKEN-ID\tHMAC\tOWNER\tREQUESTER\tRENEWERS\tISSUED\tEXPIRES\tMAX")
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	for _, t := range toks {
		var renewers []string
		for _, r := range t.Renewers {
			renewers = append(renewers, principalString(r))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.TokenID, base64.StdEncoding.EncodeToString(t.HMAC),
			principalString(t.Owner), principalString(t.TokenRequesterPrincipal), dash(strings.Join(renewers, ",")),
			ts(t.IssueTimestamp), ts(t.ExpiryTimestamp), ts(t.MaxTimestamp))
	}
	return tw.Flush()
}

// tokenHMAC reads the HMAC argument: base64, as create and describe print it.
func tokenHMAC(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("%q: want the token's HMAC in base64, as token create prints it", s)
	}
	return b, nil
}

func newTokenCreateCmd(opts *clientOptions) *cobra.Command {
	var owner string
	var renewers []string
	var maxLifetime time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a token owned by the logged-in user (or --owner, which needs CREATE_TOKENS on that user)",
		Example: `  SEDIMENT_SASL_USERNAME=alice SEDIMENT_SASL_PASSWORD=… sediment token create --security-protocol SASL_SSL --renewer scheduler
  # then the job, as alice:
  sediment consume events --security-protocol SASL_SSL --sasl-mechanism SCRAM-SHA-512 --sasl-token --sasl-username TOKEN-ID --sasl-password HMAC`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := kadm.CreateDelegationToken{MaxLifetime: maxLifetime}
			if owner != "" {
				p := userPrincipal(owner)
				req.Owner = &p
			}
			for _, r := range renewers {
				req.Renewers = append(req.Renewers, userPrincipal(r))
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				tok, err := adm.CreateDelegationToken(ctx, req)
				if err != nil {
					return fmt.Errorf("CreateDelegationToken: %w", err)
				}
				return printTokens(cmd, kadm.DelegationTokens{tok})
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&owner, "owner", "", "the token's owner (default: the logged-in user)")
	fs.StringSliceVar(&renewers, "renewer", nil, "a user who may renew and expire the token besides its owner (repeatable)")
	fs.DurationVar(&maxLifetime, "max-lifetime", 0, "the longest the token may live, renewals included (default and upper bound: the brokers' delegation-token-max-lifetime)")
	return cmd
}

func newTokenDescribeCmd(opts *clientOptions) *cobra.Command {
	var owners []string
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "List the tokens the logged-in user may see, with their HMACs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ps []kadm.Principal
			for _, o := range owners {
				ps = append(ps, userPrincipal(o))
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				toks, err := adm.DescribeDelegationTokens(ctx, ps...)
				if err != nil {
					return fmt.Errorf("DescribeDelegationToken: %w", err)
				}
				return printTokens(cmd, toks)
			})
		},
	}
	cmd.Flags().StringSliceVar(&owners, "owner", nil, "only tokens this user owns, requested or renews (repeatable)")
	return cmd
}

func newTokenRenewCmd(opts *clientOptions) *cobra.Command {
	var period time.Duration
	cmd := &cobra.Command{
		Use:   "renew HMAC",
		Short: "Push a token's expiry back (its owner or a renewer), never past its max time",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mac, err := tokenHMAC(args[0])
			if err != nil {
				return err
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				exp, err := adm.RenewDelegationToken(ctx, mac, period)
				if err != nil {
					return fmt.Errorf("RenewDelegationToken: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "expires %s\n", exp.UTC().Format(time.RFC3339))
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&period, "period", 0, "from now (default and upper bound: the brokers' delegation-token-expiry-time)")
	return cmd
}

func newTokenExpireCmd(opts *clientOptions) *cobra.Command {
	var period time.Duration
	cmd := &cobra.Command{
		Use:   "expire HMAC",
		Short: "End a token now (default), or after --period (its owner or a renewer)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mac, err := tokenHMAC(args[0])
			if err != nil {
				return err
			}
			p := period
			if !cmd.Flags().Changed("period") {
				p = -time.Millisecond // removed at once
			}
			return withAdmin(cmd, opts, func(ctx context.Context, adm *kadm.Client) error {
				exp, err := adm.ExpireDelegationToken(ctx, mac, p)
				if err != nil {
					return fmt.Errorf("ExpireDelegationToken: %w", err)
				}
				if p < 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "expired")
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "expires %s\n", exp.UTC().Format(time.RFC3339))
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&period, "period", 0, "end the token this long from now instead of at once")
	return cmd
}
