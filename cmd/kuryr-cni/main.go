// Command kuryr-cni is the CNI plugin executable of kuryr-supervisor: a thin,
// stateless client of the daemon's CNI API.
//
// The container runtime runs it once per CNI call with CNI_* variables and
// the network configuration on stdin. It forwards both to the daemon
// (POST /cni over the daemon's Unix socket, after checking with SO_PEERCRED
// that root serves it) and prints the daemon's answer: the result and exit
// status 0, or the spec's error object and exit status 1. VERSION is
// answered locally. It is the compiled twin of kuryr_supervisor/cni/shim.py
// and passes the same conformance tests; it uses the standard library only,
// so it builds offline and static (CGO_ENABLED=0) for hosts without Python.
package main

import (
	"io"
	"os"
	"strings"
)

func main() {
	env := make(map[string]string)
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var status int
	var out []byte
	stdin, err := io.ReadAll(io.LimitReader(os.Stdin, maxNetconf+1))
	if err != nil {
		status, out = errorAnswer(latest, codeDecode, "cannot read stdin", err.Error())
	} else {
		status, out = Run(env, stdin, Dial)
	}
	if len(out) > 0 {
		os.Stdout.Write(append(out, '\n'))
	}
	os.Exit(status)
}
