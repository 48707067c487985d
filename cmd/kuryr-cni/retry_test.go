package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const okAnswer = "HTTP/1.0 204 No Content\r\n\r\n"

// serveOn listens on path and hands the n-th connection (from 0) to
// handle(n, conn); it counts the connections.
func serveOn(t *testing.T, path string, handle func(n int, conn net.Conn)) *int32 {
	t.Helper()
	listener, err := net.Listen("unix", path)
	if err != nil {
		t.Error(err)
		return new(int32)
	}
	t.Cleanup(func() { listener.Close() })
	count := new(int32)
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			handle(int(atomic.AddInt32(count, 1))-1, conn)
			conn.Close()
		}
	}()
	return count
}

func readRequest(conn net.Conn) { io.ReadAll(bufio.NewReader(conn)) } // the shim half-closes

// answering reads the request and writes text.
func answering(text string) func(int, net.Conn) {
	return func(_ int, conn net.Conn) {
		readRequest(conn)
		conn.Write([]byte(text))
	}
}

// firstThen handles the first connection with first, the others with rest.
func firstThen(first, rest func(int, net.Conn)) func(int, net.Conn) {
	return func(n int, conn net.Conn) {
		if n == 0 {
			first(n, conn)
		} else {
			rest(n, conn)
		}
	}
}

func netconfFor(path string, timeout string) []byte {
	return []byte(`{"cniVersion": "1.0.0", "timeout": ` + timeout + `, "daemon_socket": "unix://` + path + `"}`)
}

// A daemon that is not there yet, gone, or closes without answering is
// tried again until it answers; the retry is logged once.
func TestRetriesUntilTheDaemonIsThere(t *testing.T) {
	asUs(t)
	cases := []struct {
		name    string
		reasons []string
		setup   func(t *testing.T, path string) *int32
	}{
		{"socket file appears after 300 ms", []string{"no socket file"}, func(t *testing.T, path string) *int32 {
			go func() {
				time.Sleep(300 * time.Millisecond)
				serveOn(t, path, answering(okAnswer))
			}()
			return nil
		}},
		{"a socket file whose listener closed", []string{"connection refused"}, func(t *testing.T, path string) *int32 {
			stale, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			stale.(*net.UnixListener).SetUnlinkOnClose(false)
			stale.Close() // the file stays, nobody listens: refused
			go func() {
				time.Sleep(300 * time.Millisecond)
				os.Remove(path)
				serveOn(t, path, answering(okAnswer))
			}()
			return nil
		}},
		{"closed without answering the first time", []string{"closed before answering"}, func(t *testing.T, path string) *int32 {
			return serveOn(t, path, firstThen(func(_ int, conn net.Conn) { readRequest(conn) }, answering(okAnswer)))
		}},
		{"closed before reading the first time", []string{"connection reset", "broken pipe"}, func(t *testing.T, path string) *int32 {
			return serveOn(t, path, firstThen(func(int, net.Conn) {}, answering(okAnswer)))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logged := quiet(t)
			path := filepath.Join(t.TempDir(), "cni.sock")
			count := c.setup(t, path)
			started := time.Now()
			status, out := Run(map[string]string{"CNI_COMMAND": "DEL"}, netconfFor(path, "10"), Dial)
			if status != 0 || len(out) != 0 {
				t.Fatalf("got %d %s after %v", status, out, time.Since(started))
			}
			line := logged()
			reason := false
			for _, r := range c.reasons {
				reason = reason || strings.Contains(line, "("+r+")")
			}
			if strings.Count(line, "\n") != 1 || !reason ||
				!strings.HasPrefix(line, "kuryr-cni: DEL: kuryr-supervisor at unix://"+path+" is not there (") ||
				!strings.HasSuffix(line, "; retrying for up to 10 s\n") {
				t.Fatalf("logged %q", line)
			}
			if count != nil && atomic.LoadInt32(count) != 2 {
				t.Fatalf("%d connections, want 2", atomic.LoadInt32(count))
			}
		})
	}
}

// The deadline bounds the whole call, retries included: then code 11.
func TestGivesUpAtTheDeadline(t *testing.T) {
	asUs(t)
	cases := []struct {
		name, reason string
		setup        func(t *testing.T, path string)
	}{
		{"no socket file", "no socket file", func(*testing.T, string) {}},
		{"closes every time", "closed before answering", func(t *testing.T, path string) {
			serveOn(t, path, func(_ int, conn net.Conn) { readRequest(conn) })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logged := quiet(t)
			path := filepath.Join(t.TempDir(), "cni.sock")
			c.setup(t, path)
			started := time.Now()
			status, out := Run(map[string]string{"CNI_COMMAND": "ADD"}, netconfFor(path, "0.5"), Dial)
			elapsed := time.Since(started)
			v := decode(t, out)
			if status != 1 || v["code"] != float64(codeTryAgain) || v["msg"] != "kuryr-supervisor is unreachable" {
				t.Fatalf("got %d %s", status, out)
			}
			details := v["details"].(string)
			if !strings.Contains(details, ": "+c.reason+"; ") || !strings.Contains(details, " attempts in 0.") {
				t.Fatalf("details %q", details)
			}
			// Not before the deadline (less the last attempt's margin), and
			// not long after it (a loaded machine's scheduling).
			if elapsed < 480*time.Millisecond || elapsed > 2*time.Second {
				t.Fatalf("gave up after %v, deadline 0.5 s", elapsed)
			}
			if strings.Count(logged(), "\n") != 1 {
				t.Fatalf("logged %q", logged())
			}
		})
	}
}

// Never sent twice: after a byte of an answer, after a time-out of an
// accepted request, or to a socket root does not serve.
func TestNeverSentTwice(t *testing.T) {
	cases := []struct {
		name, msg string
		handle    func(int, net.Conn)
		notOurs   bool
	}{
		{"part of an answer, then closed", "unreachable", answering("HTTP/1.0 20"), false},
		{"part of an answer, then reset", "unreachable", func(_ int, conn net.Conn) {
			// Closing with the request unread resets the connection.
			conn.Write([]byte("HTTP/1.0 200 OK\r\n"))
		}, false},
		{"accepted, never answered", "did not answer in time", func(_ int, conn net.Conn) {
			readRequest(conn)
			time.Sleep(time.Second)
		}, false},
		{"not served by root", "not served by root", answering(okAnswer), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			saved := requiredUID
			requiredUID = uint32(os.Geteuid())
			if c.notOurs {
				requiredUID++
			}
			t.Cleanup(func() { requiredUID = saved })
			logged := quiet(t)
			path := filepath.Join(t.TempDir(), "cni.sock")
			count := serveOn(t, path, c.handle)
			status, out := Run(map[string]string{"CNI_COMMAND": "ADD"}, netconfFor(path, "0.5"), Dial)
			v := decode(t, out)
			if status != 1 || v["code"] != float64(codeTryAgain) || !strings.Contains(v["msg"].(string), c.msg) {
				t.Fatalf("got %d %s", status, out)
			}
			time.Sleep(100 * time.Millisecond)
			if n := atomic.LoadInt32(count); n != 1 || logged() != "" {
				t.Fatalf("%d connections, logged %q", n, logged())
			}
		})
	}
}

func TestAbsentNamesTheRetriedFailures(t *testing.T) {
	for errno, want := range map[syscall.Errno]string{
		syscall.ENOENT: "no socket file", syscall.ECONNREFUSED: "connection refused",
		syscall.ECONNRESET: "connection reset", syscall.EPIPE: "broken pipe",
		syscall.EAGAIN: "listen backlog full", syscall.EACCES: "", syscall.ETIMEDOUT: "",
	} {
		err := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)}
		if got := absent(err); got != want {
			t.Errorf("absent(%v) = %q, want %q", errno, got, want)
		}
	}
}

// The logged line names a known command only: the runtime's bytes are not
// copied to its log.
func TestLoggedCommandIsKnown(t *testing.T) {
	for command, want := range map[string]string{"GC": "GC", "X\nkuryr-cni: forged": "call", "": "call"} {
		logged := quiet(t)
		path := filepath.Join(t.TempDir(), "cni.sock")
		Run(map[string]string{"CNI_COMMAND": command}, netconfFor(path, "0.05"), Dial)
		if !strings.HasPrefix(logged(), "kuryr-cni: "+want+": kuryr-supervisor at ") || strings.Count(logged(), "\n") != 1 {
			t.Errorf("%q: logged %q", command, logged())
		}
	}
}
