package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeDaemon serves one canned HTTP answer per connection on a Unix socket
// and records each request it read.
type fakeDaemon struct {
	path     string
	requests chan string
	listener net.Listener
}

func startDaemon(t *testing.T, answer string) *fakeDaemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cni.sock")
	listener, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDaemon{path: path, requests: make(chan string, 16), listener: listener}
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			data, _ := io.ReadAll(bufio.NewReader(conn)) // the shim half-closes
			d.requests <- string(data)
			if answer != "" {
				conn.Write([]byte(answer))
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() { listener.Close() })
	return d
}

// quiet keeps the retry's stderr line out of the test output; the lines
// written are returned by the function it gives back.
func quiet(t *testing.T) func() string {
	t.Helper()
	saved := logTo
	var buf strings.Builder
	logTo = &buf
	t.Cleanup(func() { logTo = saved })
	return buf.String
}

func asUs(t *testing.T) {
	t.Helper()
	saved := requiredUID
	requiredUID = uint32(os.Geteuid())
	t.Cleanup(func() { requiredUID = saved })
}

func decode(t *testing.T, out []byte) map[string]interface{} {
	t.Helper()
	var v map[string]interface{}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("output %q is not a JSON object: %v", out, err)
	}
	return v
}

func TestLocalAnswers(t *testing.T) {
	noDial := func(string, time.Duration) (net.Conn, error) {
		t.Fatal("dialled the daemon for a local answer")
		return nil, nil
	}
	cases := []struct {
		name, command, stdin string
		status, code         int
		version              string
	}{
		{"version asked", "VERSION", `{"cniVersion": "0.4.0"}`, 0, 0, "0.4.0"},
		{"version garbage", "VERSION", `garbage`, 0, 0, "1.1.0"},
		{"version unknown", "VERSION", `{"cniVersion": "9.9.9"}`, 0, 0, "1.1.0"},
		{"not json", "ADD", `{not json`, 1, codeDecode, "1.1.0"},
		{"not an object", "ADD", `[1, 2]`, 1, codeDecode, "1.1.0"},
		{"deep nesting", "ADD", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), 1, codeDecode, "1.1.0"},
		{"timeout string", "ADD", `{"cniVersion": "1.0.0", "timeout": "soon"}`, 1, codeInvalidConfig, "1.0.0"},
		{"timeout zero", "DEL", `{"cniVersion": "0.4.0", "timeout": 0}`, 1, codeInvalidConfig, "0.4.0"},
		{"timeout absurd", "DEL", `{"cniVersion": "1.0.0", "timeout": 1e9}`, 1, codeInvalidConfig, "1.0.0"},
		{"timeout bool", "DEL", `{"cniVersion": "1.0.0", "timeout": true}`, 1, codeInvalidConfig, "1.0.0"},
		{"socket number", "ADD", `{"cniVersion": "1.0.0", "daemon_socket": 5}`, 1, codeInvalidConfig, "1.0.0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, out := Run(map[string]string{"CNI_COMMAND": c.command}, []byte(c.stdin), noDial)
			v := decode(t, out)
			if status != c.status || v["cniVersion"] != c.version {
				t.Fatalf("got %d %s", status, out)
			}
			if c.code != 0 && v["code"] != float64(c.code) {
				t.Fatalf("code: got %v want %d (%s)", v["code"], c.code, out)
			}
			if c.command == "VERSION" && len(v["supportedVersions"].([]interface{})) != len(supportedVersions) {
				t.Fatalf("supportedVersions: %s", out)
			}
		})
	}
}

func TestForwardsRequestAndAnswer(t *testing.T) {
	asUs(t)
	result := `{"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}`
	d := startDaemon(t, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"+result+"\n")
	netconf := `{"cniVersion": "1.0.0", "name": "kuryr", "daemon_socket": "unix://` + d.path + `"}`
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0",
		"CNI_NETNS": "/var/run/netns/x", "HOME": "/root", "TRACEPARENT": "00-abc-01"}
	status, out := Run(env, []byte(netconf), Dial)
	if status != 0 || string(out) != result {
		t.Fatalf("got %d %q", status, out)
	}
	req := <-d.requests
	head, body, _ := strings.Cut(req, "\r\n\r\n")
	if !strings.HasPrefix(head, "POST /cni HTTP/1.0\r\n") || !strings.Contains(head, "\r\ntraceparent: 00-abc-01") {
		t.Fatalf("request head %q", head)
	}
	if !strings.Contains(head, "Content-Length: "+strconv.Itoa(len(body))) {
		t.Fatalf("content length wrong in %q for %d bytes", head, len(body))
	}
	var sent struct {
		Env    map[string]string      `json:"env"`
		Config map[string]interface{} `json:"config"`
	}
	if err := json.Unmarshal([]byte(body), &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Env["CNI_CONTAINERID"] != "c1" || sent.Env["HOME"] != "" || sent.Config["name"] != "kuryr" {
		t.Fatalf("forwarded %+v", sent)
	}
}

func TestDaemonAnswers(t *testing.T) {
	asUs(t)
	cases := []struct {
		name, answer string
		status, code int
		exact        bool
	}{
		{"no content", "HTTP/1.0 204 No Content\r\n\r\n", 0, -1, false},
		{"cni error", "HTTP/1.0 400 Bad Request\r\n\r\n{\"cniVersion\": \"1.0.0\", \"code\": 4, \"msg\": \"m\"}", 1, 4, true},
		{"html error", "HTTP/1.0 500 Oops\r\n\r\n<html>", 1, codeInternal, false},
		{"not http", "SSH-2.0-OpenSSH\r\n", 1, codeTryAgain, false},
		{"nothing", "", 1, codeTryAgain, false},
		{"a body for DEL", "HTTP/1.0 200 OK\r\n\r\n{}", 1, codeInvalidResult, false},
		{"cut short", "HTTP/1.0 200 OK\r\nContent-Length: 40\r\n\r\n{\"cniVersion\"", 1, codeTryAgain, false},
		{"head cut short", "HTTP/1.0 204 No Content\r\n", 1, codeTryAgain, false},
		{"status not 3 digits", "HTTP/1.0 2040 No Content\r\n\r\n", 1, codeTryAgain, false},
		{"length met", "HTTP/1.0 204 No Content\r\ncontent-length:  0\r\n\r\n", 0, -1, false},
	}
	quiet(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := startDaemon(t, c.answer)
			netconf := `{"cniVersion": "1.0.0", "timeout": 0.5, "daemon_socket": "unix://` + d.path + `"}`
			status, out := Run(map[string]string{"CNI_COMMAND": "DEL"}, []byte(netconf), Dial)
			if status != c.status {
				t.Fatalf("status %d, out %q", status, out)
			}
			if c.code == -1 {
				if len(out) != 0 {
					t.Fatalf("expected no output, got %q", out)
				}
				return
			}
			if v := decode(t, out); v["code"] != float64(c.code) {
				t.Fatalf("code %v want %d", v["code"], c.code)
			}
		})
	}
}

func TestPeerNotRootIsRefusedBeforeSending(t *testing.T) {
	saved := requiredUID
	requiredUID = uint32(os.Geteuid()) + 1 // whoever we are, not the required one
	t.Cleanup(func() { requiredUID = saved })
	d := startDaemon(t, "HTTP/1.0 200 OK\r\n\r\n{}")
	netconf := `{"cniVersion": "1.0.0", "daemon_socket": "unix://` + d.path + `"}`
	status, out := Run(map[string]string{"CNI_COMMAND": "ADD"}, []byte(netconf), Dial)
	v := decode(t, out)
	if status != 1 || v["code"] != float64(codeTryAgain) || !strings.Contains(v["msg"].(string), "not served by root") {
		t.Fatalf("got %d %s", status, out)
	}
	select {
	case req := <-d.requests:
		if req != "" {
			t.Fatalf("request sent to an untrusted peer: %q", req)
		}
	case <-time.After(2 * time.Second):
	}
}

func TestSilentDaemonTimesOut(t *testing.T) {
	asUs(t)
	path := filepath.Join(t.TempDir(), "mute.sock")
	listener, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	go func() { // accept and hold, never answer
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	started := time.Now()
	netconf := `{"cniVersion": "1.0.0", "timeout": 0.3, "daemon_socket": "unix://` + path + `"}`
	status, out := Run(map[string]string{"CNI_COMMAND": "ADD"}, []byte(netconf), Dial)
	if status != 1 || decode(t, out)["code"] != float64(codeTryAgain) || time.Since(started) > 5*time.Second {
		t.Fatalf("got %d %s after %v", status, out, time.Since(started))
	}
	if !strings.Contains(string(out), "in time") {
		t.Fatalf("not a time-out: %s", out)
	}
}

func TestAddresses(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///run/x.sock": "/run/x.sock", "unix:/run/x.sock": "/run/x.sock",
		"unix:////run/x.sock": "/run/x.sock", "unix:rel.sock": "rel.sock",
	} {
		if got := unixPath(in); got != want {
			t.Errorf("unixPath(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := Dial("127.0.0.1", time.Second); err == nil {
		t.Error("an address without a port was accepted")
	}
	if _, err := Dial("http://127.0.0.1:1/", time.Second); err == nil {
		t.Error("connected to port 1")
	}
}
