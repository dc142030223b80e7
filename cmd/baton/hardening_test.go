//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// TestHTTPCannotStarveProtocol: under a low RLIMIT_NOFILE, a crowd of
// idle connections on the ops port (some after a keep-alive request, most
// silent) takes at most -http-max-connections descriptors: an ACQUIRE on
// the protocol port is answered at once, not after the HTTP timeouts.
func TestHTTPCannotStarveProtocol(t *testing.T) {
	t.Parallel()
	const limit, idle = 64, 150
	proc := startBatonCmd(t, exec.Command("sh", "-c",
		fmt.Sprintf(`ulimit -n %d && exec "$0" serve -log-format json -listen 127.0.0.1:0 -ops-listen 127.0.0.1:0 -http-max-connections 8`, limit), batonBin))
	rec := proc.waitLog(t, "baton listening")
	addr, _ := rec["addr"].(string)
	opsAddr, _ := rec["ops_addr"].(string)

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range idle {
		c, err := net.DialTimeout("tcp", opsAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("ops connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i < 4 { // keep-alive connections that made one request
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("keep-alive request %d: %v", i, err)
			}
			resp.Body.Close()
		}
	}

	start := time.Now()
	c := fdAcquire(t, addr, "after-the-crowd")
	f, err := fdReply(c, 3*time.Second)
	took := time.Since(start)
	t.Logf("ACQUIRE answered in %v with %d idle ops connections under %d descriptors", took, idle, limit)
	if err != nil || f.Type != protocol.TypeAcquired {
		t.Fatalf("ACQUIRE with %d idle ops connections: %v %v after %v (the HTTP side took the descriptors)", idle, f, err, took)
	}
}
