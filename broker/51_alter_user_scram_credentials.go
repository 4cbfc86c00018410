package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sediment-io/sediment/metadata"
)

// AlterUserScramCredentials: v0
//
// Sets and removes users' SCRAM credentials (KIP-554): the client sends the
// salt, the iteration count and the salted password, never the password;
// the broker derives the stored and server keys (sasl.go) and one metadata
// command per user applies that user's changes at once. Per user, as Kafka:
// an empty name or salted password UNACCEPTABLE_CREDENTIAL, an iteration
// count outside [4096, 16384] UNACCEPTABLE_CREDENTIAL, an unknown mechanism
// UNSUPPORTED_SASL_MECHANISM, the same user and mechanism twice
// DUPLICATE_RESOURCE, the deletion of a credential that does not exist
// RESOURCE_NOT_FOUND. Without an authorizer, as in Kafka, any client may
// call it. v0 flexible.

func init() { regKey(51, 0, 0).handler = handleAlterUserScramCredentials }

func handleAlterUserScramCredentials(ctx context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	type change struct {
		ops []metadata.ConfigOp
		err error
	}
	var order []string
	changes := map[string]*change{}
	seen := map[[2]string]bool{}
	st := b.meta.State()
	add := func(user string, mech int8, op func(name string) (metadata.ConfigOp, error)) {
		c := changes[user]
		if c == nil {
			c = &change{}
			changes[user] = c
			order = append(order, user)
		}
		if c.err != nil {
			return
		}
		name, ok := scramMechanismTypes[mech]
		switch {
		case user == "":
			c.err = fmt.Errorf("%w: username must not be empty", kerr.UnacceptableCredential)
		case !ok:
			c.err = fmt.Errorf("%w: unknown SCRAM mechanism %d", kerr.UnsupportedSaslMechanism, mech)
		case seen[[2]string{user, name}]:
			c.err = fmt.Errorf("%w: a user credential cannot be altered twice in the same request", kerr.DuplicateResource)
		}
		if c.err != nil {
			return
		}
		seen[[2]string{user, name}] = true
		o, err := op(name)
		if err != nil {
			c.err = err
			return
		}
		c.ops = append(c.ops, o)
	}
	for _, d := range req.Deletions {
		add(d.Name, d.Mechanism, func(mech string) (metadata.ConfigOp, error) {
			if _, ok := st.UserConfigs(d.Name)[mech]; !ok {
				return metadata.ConfigOp{}, fmt.Errorf("%w: attempt to delete a user credential that does not exist", kerr.ResourceNotFound)
			}
			return userConfigOp(mech, nil), nil
		})
	}
	for _, u := range req.Upsertions {
		add(u.Name, u.Mechanism, func(mech string) (metadata.ConfigOp, error) {
			switch {
			case u.Iterations < scramMinIterations:
				return metadata.ConfigOp{}, fmt.Errorf("%w: too few iterations (%d, at least %d)", kerr.UnacceptableCredential, u.Iterations, scramMinIterations)
			case u.Iterations > scramMaxIterations:
				return metadata.ConfigOp{}, fmt.Errorf("%w: too many iterations (%d, at most %d)", kerr.UnacceptableCredential, u.Iterations, scramMaxIterations)
			case len(u.SaltedPassword) == 0:
				return metadata.ConfigOp{}, fmt.Errorf("%w: empty salted password", kerr.UnacceptableCredential)
			}
			// Like Kafka, no check of the salt or of the salted
			// password's length (it is an HMAC key): kafka-go's own
			// tests send an 18-byte one.
			c := scramFromSaltedPassword(mech, u.Salt, u.SaltedPassword, u.Iterations)
			return userConfigOp(mech, &c), nil
		})
	}
	for _, user := range order {
		c := changes[user]
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User = user
		err := c.err
		if err == nil {
			_, _, err = b.store.propose(ctx, &metadata.AlterConfigs{ResourceType: metadata.ResourceUser, ResourceName: user, Ops: c.ops})
		}
		if err != nil {
			res.ErrorCode = errCode(err)
			res.ErrorMessage = errMessage(err)
		}
		resp.Results = append(resp.Results, res)
	}
	return &Reply{Msg: resp}, nil
}
