package main

// The daemon's side of the call: connect, make sure root is listening,
// one HTTP/1.0 request, the whole exchange bounded by the timeout.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
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

// CallDaemon POSTs body to /cni; (HTTP status, body) or a shimError(11).
func CallDaemon(dial Dialer, address string, body []byte, timeout time.Duration,
	headers map[string]string) (int, []byte, error) {
	deadline := time.Now().Add(timeout)
	conn, err := dial(address, timeout)
	if err != nil {
		return 0, nil, unreachable(address, timeout, err)
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
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
	if _, err := conn.Write(req.Bytes()); err != nil {
		return 0, nil, unreachable(address, timeout, err)
	}
	// Half-close: the server sees at once that the request is complete.
	if hc, ok := conn.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
	}
	answer, err := io.ReadAll(io.LimitReader(conn, maxAnswer))
	if err != nil {
		return 0, nil, unreachable(address, timeout, err)
	}
	return parseAnswer(address, answer)
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

// parseAnswer splits an HTTP/1.x answer read to EOF into status and body.
func parseAnswer(address string, answer []byte) (int, []byte, error) {
	invalid := &shimError{codeTryAgain, "kuryr-supervisor is unreachable",
		address + ": no valid HTTP answer"}
	reader := bufio.NewReader(bytes.NewReader(answer))
	line, err := reader.ReadString('\n')
	if err != nil && line == "" {
		return 0, nil, invalid
	}
	parts := strings.Fields(line)
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "HTTP/") {
		return 0, nil, invalid
	}
	status, err := strconv.Atoi(parts[1])
	if err != nil || status < 100 || status > 999 {
		return 0, nil, invalid
	}
	_, body, found := bytes.Cut(answer, []byte("\r\n\r\n"))
	if !found {
		body = nil
	}
	return status, body, nil
}
