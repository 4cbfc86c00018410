package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func testKcatMore(t *testing.T, b *Broker) {
	t.Skip("todo")
}

var _ = json.Unmarshal
var _ = fmt.Sprint
var _ = strings.Split
