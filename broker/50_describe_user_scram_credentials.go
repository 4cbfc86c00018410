package broker

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeUserScramCredentials: v0
//
// The SCRAM mechanisms and iteration counts each user has (never the
// credentials themselves), from the metadata state (sasl.go). No users, or
// null, describes every user. A user without credentials gets
// RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE, as in Kafka.
// v0 flexible.

func init() { regKey(50, 0, 0).handler = handleDescribeUserScramCredentials }

func handleDescribeUserScramCredentials(_ context.Context, b *Broker, r *Request) (*Reply, error) {
	req := r.Msg.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	st := b.meta.State()
	var names []string
	if len(req.Users) == 0 {
		names = st.Users()
	} else {
		for _, u := range req.Users {
			names = append(names, u.Name)
		}
	}
	count := map[string]int{}
	for _, n := range names {
		count[n]++
	}
	done := map[string]bool{}
	for _, name := range names {
		if done[name] {
			continue
		}
		done[name] = true
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = name
		creds := st.UserConfigs(name)
		switch {
		case count[name] > 1:
			res.ErrorCode = kerr.DuplicateResource.Code
			res.ErrorMessage = kmsg.StringPtr("Cannot describe SCRAM credentials for the same user twice in a single request: " + name)
		case len(creds) == 0:
			res.ErrorCode = kerr.ResourceNotFound.Code
			res.ErrorMessage = kmsg.StringPtr("Attempt to describe a user credential that does not exist: " + name)
		default:
			for mech, v := range creds {
				c, err := parseSCRAMCredential(v)
				t := scramMechanismType(mech)
				if err != nil || t == 0 {
					continue
				}
				ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				ci.Mechanism, ci.Iterations = t, int32(c.Iters)
				res.CredentialInfos = append(res.CredentialInfos, ci)
			}
			sort.Slice(res.CredentialInfos, func(i, j int) bool {
				return res.CredentialInfos[i].Mechanism < res.CredentialInfos[j].Mechanism
			})
		}
		resp.Results = append(resp.Results, res)
	}
	return &Reply{Msg: resp}, nil
}
