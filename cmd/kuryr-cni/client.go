package main

// The daemon's side of the call: connect, make sure root is listening,
// one HTTP/1.0 request, sent again while no daemon is there, the whole call
// bounded by the timeout.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxAnswer bounds what is read from the daemon.
const maxAnswer = 16 << 20

// requiredUID is the uid the daemon's Unix socket must be served by. A
// variable only so the Go tests can run their own listener unprivileged.
var requiredUID uint32 = 0

// Dialer connects to a daemon address within timeout.
type Dialer func(address string, timeout time.Duration) (net.Conn, error)

// Dial connects to "unix:///path" (checking its peer with SO_PEERCRED) or to
// "[http://]host:port" (Kuryr's TCP compatibility bind: no peer to check).
func Dial(address string, timeout time.Duration) (net.Conn, error) {
	if strings.HasPrefix(address, "unix:") {
		conn, err := net.DialTimeout("unix", unixPath(address), timeout)
		if err != nil {
			return nil, err
		}
		if err := checkPeer(conn.(*net.UnixConn), address); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
	hostport := address
	if i := strings.Index(hostport, "://"); i >= 0 {
		hostport = hostport[i+3:]
	}
	hostport = strings.TrimRight(hostport, "/")
	i := strings.LastIndex(hostport, ":")
	if i < 0 {
		return nil, fmt.Errorf("address %q has no port", address)
	}
	host := strings.Trim(hostport[:i], "[]")
	port, err := strconv.Atoi(hostport[i+1:])
	if err != nil {
		return nil, fmt.Errorf("address %q has an invalid port", address)
	}
	return net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), timeout)
}

// unixPath is the file name of "unix:///path", "unix:/path" or "unix:path".
func unixPath(address string) string {
	path := strings.TrimPrefix(address, "unix:")
	if strings.HasPrefix(path, "//") {
		path = "/" + strings.TrimLeft(path, "/")
	}
	return path
}

// checkPeer refuses a socket whose listener is not requiredUID: anyone who
// could swap the socket file must not receive the runtime's request nor
// forge its result.
func checkPeer(conn *net.UnixConn, address string) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return &shimError{codeTryAgain, "cannot tell who serves the kuryr-supervisor socket",
			fmt.Sprintf("%s: SO_PEERCRED: %v", address, credErr)}
	}
	if cred.Uid != requiredUID {
		return &shimError{codeTryAgain, "kuryr-supervisor socket is not served by root",
			fmt.Sprintf("%s: peer uid %d (pid %d), not %d; request not sent",
				address, cred.Uid, cred.Pid, requiredUID)}
	}
	return nil
}

// Backoff between attempts while no daemon is there: the first pause, the
// longest, and the least time worth a last attempt before the deadline.
const (
	firstPause   = 20 * time.Millisecond
	longestPause = time.Second
	lastAttempt  = 10 * time.Millisecond
)

// logTo receives the one line a call logs when it starts retrying
// (runtimes capture a plugin's stderr). A variable for the tests.
var logTo io.Writer = os.Stderr

// noAnswer says that no daemon took the request and not a byte of an answer
// came: the request is safe to send again.
type noAnswer struct{ reason string }

func (e *noAnswer) Error() string { return e.reason }

// absent names a failure that says no daemon is there right now (not yet
// started, restarting, its listen backlog full), in the words both shims
// log; "" for any other failure.
func absent(err error) string {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return "no socket file"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, syscall.EAGAIN):
		return "listen backlog full"
	}
	return ""
}

// CallDaemon POSTs body to /cni; (HTTP status, body) or a shimError(11).
// The timeout bounds the whole call, retries included: a daemon that is not
// there is tried again after a pause (equal jitter: half the backoff plus a
// random part of the other half; 20 ms doubling to 1 s), and the first
// retry is logged once. An answer of which a byte arrived is final.
func CallDaemon(dial Dialer, address string, body []byte, timeout time.Duration,
	headers map[string]string, command string) (int, []byte, error) {
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST /cni HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&req, "%s: %s\r\n", name, headers[name])
	}
	req.WriteString("\r\n")
	req.Write(body)
	started := time.Now()
	deadline := started.Add(timeout)
	pause := firstPause
	jitter := rand.New(rand.NewSource(started.UnixNano()))
	for attempts := 1; ; attempts++ {
		answer, err := exchange(dial, address, req.Bytes(), deadline)
		var na *noAnswer
		if !errors.As(err, &na) {
			if err != nil {
				return 0, nil, unreachable(address, timeout, err)
			}
			return parseAnswer(address, answer)
		}
		left := time.Until(deadline)
		if left <= lastAttempt {
			plural := "s"
			if attempts == 1 {
				plural = ""
			}
			return 0, nil, &shimError{codeTryAgain, "kuryr-supervisor is unreachable",
				fmt.Sprintf("%s: %s; %d attempt%s in %.1f s", address, na.reason,
					attempts, plural, time.Since(started).Seconds())}
		}
		if attempts == 1 {
			switch command { // the runtime's command, never its raw bytes
			case "ADD", "DEL", "CHECK", "GC", "STATUS":
			default:
				command = "call"
			}
			fmt.Fprintf(logTo, "kuryr-cni: %s: kuryr-supervisor at %s is not there (%s); retrying for up to %g s\n",
				command, address, na.reason, timeout.Seconds())
		}
		sleep := pause/2 + time.Duration(jitter.Int63n(int64(pause/2)))
		if sleep > left-lastAttempt {
			sleep = left - lastAttempt
		}
		time.Sleep(sleep)
		if pause *= 2; pause > longestPause {
			pause = longestPause
		}
	}
}

// exchange is one attempt: connect, send, read to EOF. A *noAnswer when
// nothing of an answer came and the failure says no daemon was there; any
// other failure as it is (a time-out, the peer check).
func exchange(dial Dialer, address string, request []byte, deadline time.Time) ([]byte, error) {
	left := time.Until(deadline)
	if left < time.Millisecond {
		left = time.Millisecond
	}
	conn, err := dial(address, left)
	if err != nil {
		if reason := absent(err); reason != "" {
			return nil, &noAnswer{reason}
		}
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	// A peer that closed while we write may still have answered (an early
	// error): what it wrote is read, and only nothing at all is no answer.
	unsent := ""
	if _, err := conn.Write(request); err != nil {
		if unsent = absent(err); unsent == "" {
			return nil, err
		}
	} else if hc, ok := conn.(interface{ CloseWrite() error }); ok {
		// Half-close: the server sees at once that the request is complete.
		hc.CloseWrite()
	}
	answer, err := io.ReadAll(io.LimitReader(conn, maxAnswer))
	if len(answer) > 0 {
		if err != nil { // part of an answer came: it is final
			return nil, err
		}
		return answer, nil
	}
	if unsent != "" {
		return nil, &noAnswer{unsent}
	}
	if err == nil {
		return nil, &noAnswer{"closed before answering"}
	}
	if reason := absent(err); reason != "" {
		return nil, &noAnswer{reason}
	}
	return nil, err
}

func unreachable(address string, timeout time.Duration, err error) error {
	var se *shimError
	if errors.As(err, &se) {
		return se
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &shimError{codeTryAgain, "kuryr-supervisor did not answer in time",
			fmt.Sprintf("%s: no answer within %g s", address, timeout.Seconds())}
	}
	return &shimError{codeTryAgain, "kuryr-supervisor is unreachable",
		fmt.Sprintf("%s: %v", address, err)}
}

// parseAnswer splits an HTTP/1.x answer read to EOF into status and body;
// a shimError(11) if it is not one or was cut short (its Content-Length
// not met).
func parseAnswer(address string, answer []byte) (int, []byte, error) {
	invalid := &shimError{codeTryAgain, "kuryr-supervisor is unreachable",
		address + ": no valid HTTP answer"}
	head, body, found := bytes.Cut(answer, []byte("\r\n\r\n"))
	if !found {
		return 0, nil, invalid
	}
	lines := strings.Split(string(head), "\r\n")
	parts := strings.Fields(lines[0])
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "HTTP/") || len(parts[1]) != 3 || !digits(parts[1]) {
		return 0, nil, invalid
	}
	status, _ := strconv.Atoi(parts[1])
	for _, line := range lines[1:] {
		name, value, _ := strings.Cut(line, ":")
		if strings.EqualFold(strings.TrimSpace(name), "content-length") {
			if strings.TrimSpace(value) != strconv.Itoa(len(body)) {
				return 0, nil, invalid
			}
		}
	}
	return status, body, nil
}

// digits: a non-empty run of ASCII digits.
func digits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
