package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// interBrokerTokenEarly is how long before its expiry a token is replaced:
// a login then never presents one about to expire.
const interBrokerTokenEarly = time.Minute

// interBrokerTokenMax bounds a token file's size.
const interBrokerTokenMax = 64 << 10

// interBrokerTokens gets the OAUTHBEARER access tokens of the broker's own
// clients (interbroker_sasl.go).
type interBrokerTokens struct {
	once sync.Once
	src  oauth2.TokenSource // client credentials, reused until near expiry
	file string             // or a token file
}

// interBrokerToken returns an access token for a login.
func (b *Broker) interBrokerToken(ctx context.Context) (string, error) {
	c := b.cfg.InterBrokerSASL
	t := &b.ibTokens
	t.once.Do(func() {
		u, err := url.Parse(c.TokenEndpoint)
		if err == nil && u.Scheme == "file" {
			t.file = u.Path
			return
		}
		cc := clientcredentials.Config{ClientID: c.User, ClientSecret: c.Password, TokenURL: c.TokenEndpoint, Scopes: strings.Fields(c.Scope)}
		// The source outlives any one login: its requests are bounded
		// by the HTTP client's timeout, not a login's context.
		hc := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Timeout: 30 * time.Second})
		fetch := tokenSourceFunc(func() (*oauth2.Token, error) {
			tok, err := cc.Token(hc)
			if err == nil && tok.Expiry.IsZero() {
				tok.Expiry = tokenExpiry(tok.AccessToken, time.Now())
			}
			return tok, err
		})
		t.src = oauth2.ReuseTokenSourceWithExpiry(nil, fetch, interBrokerTokenEarly)
	})
	if t.file != "" {
		f, err := os.Open(t.file)
		if err != nil {
			return "", fmt.Errorf("inter-broker OAUTHBEARER token file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, interBrokerTokenMax+1))
		if err != nil {
			return "", fmt.Errorf("inter-broker OAUTHBEARER token file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" || len(b) > interBrokerTokenMax {
			return "", fmt.Errorf("inter-broker OAUTHBEARER token file %s: empty or over %d bytes", t.file, interBrokerTokenMax)
		}
		return tok, nil
	}
	type result struct {
		tok *oauth2.Token
		err error
	}
	ch := make(chan result, 1)
	go func() {
		tok, err := t.src.Token()
		ch <- result{tok, err}
	}()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case r := <-ch:
		if r.err != nil {
			var re *oauth2.RetrieveError
			if errors.As(r.err, &re) && re.Response != nil {
				b.log.Warn("inter-broker OAUTHBEARER: the token endpoint refused", "url", c.TokenEndpoint, "status", re.Response.StatusCode, "error", re.ErrorCode)
			}
			return "", fmt.Errorf("inter-broker OAUTHBEARER token: %w", r.err)
		}
		return r.tok.AccessToken, nil
	}
}

type tokenSourceFunc func() (*oauth2.Token, error)

func (f tokenSourceFunc) Token() (*oauth2.Token, error) { return f() }

// interBrokerTokenNoExpiry is how long a token is reused when neither the
// endpoint (expires_in, only recommended by RFC 6749) nor the token says
// when it expires.
const interBrokerTokenNoExpiry = 5 * time.Minute

// tokenExpiry is when a token the endpoint gave without expires_in
// expires: its JWT exp claim (read, not verified: the peers verify it), as
// Kafka's login takes the lifetime from the token; without one,
// interBrokerTokenNoExpiry from now.
func tokenExpiry(token string, now time.Time) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) == 3 {
		if payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "=")); err == nil {
			var claims struct {
				Exp json.Number `json:"exp"`
			}
			if json.Unmarshal(payload, &claims) == nil {
				if exp, err := claims.Exp.Float64(); err == nil && exp > 0 && exp < 1e11 {
					return time.Unix(int64(exp), 0)
				}
			}
		}
	}
	return now.Add(interBrokerTokenNoExpiry)
}
