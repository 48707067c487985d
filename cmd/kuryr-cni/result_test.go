package main

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// resultCase is one row of testdata/results.json, the table that
// tests/unit/test_cni_shim.py runs against the Python shim too: both shims
// judge a result alike, in the same words.
type resultCase struct {
	Name       string  `json:"name"`
	Command    string  `json:"command"`
	CNIVersion *string `json:"cniVersion"`
	Body       string  `json:"body"`
	Problem    string  `json:"problem"`
}

func TestResultProblem(t *testing.T) {
	data, err := os.ReadFile("testdata/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []resultCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var requested interface{}
			if c.CNIVersion != nil {
				requested = *c.CNIVersion
			}
			if got := resultProblem(c.Command, requested, []byte(c.Body)); got != c.Problem {
				t.Fatalf("got %q, want %q", got, c.Problem)
			}
		})
	}
	// Not expressible in the JSON table: a byte that is not UTF-8.
	if got := resultProblem("ADD", "1.0.0", []byte("{\"cniVersion\": \"1.0.0\", \"x\": \"\xff\"}")); got != "the result is not UTF-8" {
		t.Fatalf("not UTF-8: got %q", got)
	}
}

// A 2xx answer that is not a result is code 999 naming why, in the
// request's version; a valid result is printed as the daemon wrote it.
func TestGarbageSuccessIsCode999(t *testing.T) {
	asUs(t)
	cases := []struct {
		name, command, answer, details string
		status                         int
	}{
		{"garbage", "ADD", "HTTP/1.0 200 OK\r\n\r\n<html>", "the result is not JSON", 1},
		{"empty ADD", "ADD", "HTTP/1.0 200 OK\r\n\r\n", "the answer has no result", 1},
		{"body for DEL", "DEL", "HTTP/1.0 200 OK\r\n\r\nok\n", "DEL prints nothing on success, but the answer had 2 bytes", 1},
		{"result", "ADD", "HTTP/1.0 200 OK\r\n\r\n\n{\"cniVersion\": \"0.4.0\", \"ips\": [{\"version\": \"4\", \"address\": \"10.1.0.5/24\"}]}\n", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := startDaemon(t, c.answer)
			netconf := `{"cniVersion": "0.4.0", "daemon_socket": "unix://` + d.path + `"}`
			status, out := Run(map[string]string{"CNI_COMMAND": c.command}, []byte(netconf), Dial)
			if status != c.status {
				t.Fatalf("got %d %s", status, out)
			}
			if c.status == 0 {
				if want := `{"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.1.0.5/24"}]}`; string(out) != want {
					t.Fatalf("printed %q", out)
				}
				return
			}
			v := decode(t, out)
			if v["code"] != float64(codeInvalidResult) || v["cniVersion"] != "0.4.0" || v["details"] != c.details ||
				v["msg"] != "kuryr-supervisor answered HTTP 200 with an invalid "+c.command+" result" {
				t.Fatalf("got %s", out)
			}
		})
	}
}

// A CNI_* variable that is not UTF-8 is code 4 before anything is sent,
// in the daemon's words; other variables are not the shim's business, and
// a trace header that is not UTF-8 is dropped.
func TestNonUTF8EnvironmentIsCode4(t *testing.T) {
	noDial := func(string, time.Duration) (net.Conn, error) {
		t.Fatal("dialled the daemon")
		return nil, nil
	}
	for _, key := range cniKeys[1:] {
		t.Run(key, func(t *testing.T) {
			env := map[string]string{"CNI_COMMAND": "ADD", key: "a\xffb"}
			status, out := Run(env, []byte(`{"cniVersion": "0.4.0", "daemon_socket": "unix:///nonexistent"}`), noDial)
			v := decode(t, out)
			if status != 1 || v["code"] != float64(codeInvalidEnvironment) || v["msg"] != key+" is not valid UTF-8" ||
				v["details"] != "" || v["cniVersion"] != "0.4.0" {
				t.Fatalf("got %d %s", status, out)
			}
		})
	}
	t.Run("CNI_COMMAND", func(t *testing.T) {
		status, out := Run(map[string]string{"CNI_COMMAND": "A\xc3D"}, []byte(`{}`), noDial)
		if v := decode(t, out); status != 1 || v["msg"] != "CNI_COMMAND is not valid UTF-8" {
			t.Fatalf("got %d %s", status, out)
		}
	})
	t.Run("others pass", func(t *testing.T) {
		asUs(t)
		d := startDaemon(t, okAnswer)
		env := map[string]string{"CNI_COMMAND": "DEL", "HOME": "\xff", "CNI_ARGS": "K8S_POD_NAME=é",
			"TRACEPARENT": "00-\xff-01"}
		status, out := Run(env, []byte(`{"cniVersion": "1.0.0", "daemon_socket": "unix://`+d.path+`"}`), Dial)
		if status != 0 || len(out) != 0 {
			t.Fatalf("got %d %s", status, out)
		}
		if req := <-d.requests; strings.Contains(req, "traceparent") || !strings.Contains(req, "K8S_POD_NAME=é") {
			t.Fatalf("sent %q", req)
		}
	})
}
