package main

// One CNI invocation as a pure function of the environment, stdin and a
// dialer: everything main does except the process's own I/O, so that the
// table-driven tests cover it without exec'ing anything.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Spec error codes the shim answers itself (the daemon answers the rest).
const (
	codeInvalidEnvironment = 4
	codeDecode             = 6
	codeInvalidConfig      = 7
	codeTryAgain           = 11
	// codeNotAvailable: STATUS, the plugin cannot serve an ADD now.
	codeNotAvailable = 50
	codeInternal     = 100
	// codeInvalidResult: a 2xx answer that is not a valid CNI result.
	codeInvalidResult = 999
)

const (
	defaultSocket = "unix:///run/kuryr-supervisor/cni.sock"
	// maxTimeout is the longest timeout a netconf may ask for (a day);
	// beyond it is a mistake, as in the Python shim.
	maxTimeout = 86400
	// maxNetconf bounds what is read from stdin (the daemon refuses more).
	maxNetconf = 16 << 20
	// statusTimeout bounds a STATUS whatever the netconf's timeout says: a
	// runtime calls STATUS every few seconds and waits for it, so a daemon
	// that is not there is code 50 at once rather than a minute of retries.
	statusTimeout = 2 * time.Second
)

// supportedVersions is kept in step with kuryr_supervisor.cni.protocol by a
// test (tests/functional/test_shim_conformance.py).
var supportedVersions = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}

var latest = supportedVersions[len(supportedVersions)-1]

// cniKeys are the variables forwarded to the daemon; traceVars (W3C trace
// context) go as HTTP headers when the runtime sets them.
var (
	cniKeys   = []string{"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"}
	traceVars = []string{"TRACEPARENT", "TRACESTATE"}
)

// shimError is a CNI error the shim answers itself.
type shimError struct {
	code    int
	msg     string
	details string
}

func (e *shimError) Error() string { return e.msg + ": " + e.details }

// Run handles one invocation: (exit status, text for stdout).
func Run(env map[string]string, stdin []byte, dial Dialer) (int, []byte) {
	command := env["CNI_COMMAND"]
	if len(stdin) > maxNetconf {
		return errorAnswer(latest, codeDecode, "network configuration is too large",
			fmt.Sprintf("more than %d bytes", maxNetconf))
	}
	var netconf interface{} = map[string]interface{}{}
	blank := len(bytes.TrimSpace(stdin)) == 0
	if !blank {
		if err := json.Unmarshal(stdin, &netconf); err != nil {
			if command != "VERSION" {
				return errorAnswer(latest, codeDecode, "network configuration is not JSON", err.Error())
			}
			netconf = map[string]interface{}{}
		}
	}
	version := versionOf(netconf)
	if command == "VERSION" {
		out, _ := json.Marshal(map[string]interface{}{
			"cniVersion": version, "supportedVersions": supportedVersions})
		return 0, out
	}
	conf, ok := netconf.(map[string]interface{})
	if !ok {
		return errorAnswer(version, codeDecode, "network configuration must be an object", "")
	}
	address, timeout, err := options(conf, command)
	if err != nil {
		return errorAnswer(version, codeInvalidConfig, err.Error(), "")
	}
	forwarded := make(map[string]string)
	for _, key := range cniKeys {
		if value, ok := env[key]; ok {
			// The daemon's own check, in its words (encoding/json would
			// silently replace the bytes).
			if !utf8.ValidString(value) {
				return errorAnswer(version, codeInvalidEnvironment, key+" is not valid UTF-8", "")
			}
			forwarded[key] = value
		}
	}
	headers := make(map[string]string)
	for _, key := range traceVars {
		if value := env[key]; value != "" && printable(value) {
			headers[strings.ToLower(key)] = value
		}
	}
	envJSON, err := json.Marshal(forwarded)
	if err != nil {
		return errorAnswer(version, codeDecode, "cannot encode the environment", err.Error())
	}
	// The netconf goes on as the runtime wrote it: valid JSON (parsed above).
	config := stdin
	if blank {
		config = []byte("{}")
	}
	body := make([]byte, 0, len(envJSON)+len(config)+24)
	body = append(body, `{"env": `...)
	body = append(body, envJSON...)
	body = append(body, `, "config": `...)
	body = append(body, config...)
	body = append(body, '}')
	if command == "STATUS" && timeout > statusTimeout {
		timeout = statusTimeout
	}
	status, answer, err := CallDaemon(dial, address, body, timeout, headers, command)
	if err != nil {
		se := &shimError{codeTryAgain, "kuryr-supervisor is unreachable", err.Error()}
		errors.As(err, &se)
		code := se.code
		if command == "STATUS" && code == codeTryAgain {
			code = codeNotAvailable
		}
		return errorAnswer(version, code, se.msg, se.details)
	}
	if status >= 200 && status < 300 {
		result := bytes.Trim(answer, " \t\n\r")
		if problem := resultProblem(command, conf["cniVersion"], result); problem != "" {
			return errorAnswer(version, codeInvalidResult,
				fmt.Sprintf("kuryr-supervisor answered HTTP %d with an invalid %s result", status, command), problem)
		}
		return 0, result
	}
	text := bytes.TrimSpace(answer)
	var object map[string]interface{}
	if json.Unmarshal(text, &object) != nil || object["code"] == nil {
		details := string(text)
		if len(details) > 500 {
			details = details[:500]
		}
		return errorAnswer(version, codeInternal,
			fmt.Sprintf("kuryr-supervisor answered HTTP %d", status), details)
	}
	return 1, text
}

// options reads daemon_socket and timeout from the netconf.
func options(conf map[string]interface{}, command string) (string, time.Duration, error) {
	address := defaultSocket
	if raw, ok := conf["daemon_socket"]; ok {
		s, isString := raw.(string)
		if !isString {
			return "", 0, badOptions()
		}
		address = s
	}
	seconds := 60.0
	if command == "ADD" {
		seconds = 120.0
	}
	if raw, ok := conf["timeout"]; ok {
		f, isNumber := raw.(float64)
		if !isNumber {
			return "", 0, badOptions()
		}
		seconds = f
	}
	if !(seconds > 0 && seconds <= maxTimeout) {
		return "", 0, badOptions()
	}
	return address, time.Duration(seconds * float64(time.Second)), nil
}

func badOptions() error {
	return fmt.Errorf("daemon_socket must be a string, timeout a number of seconds in (0, %d]", maxTimeout)
}

// versionOf is the cniVersion to answer in: the netconf's when we support
// it, else the latest (an error about the version must still be readable).
func versionOf(netconf interface{}) string {
	if conf, ok := netconf.(map[string]interface{}); ok {
		if v, ok := conf["cniVersion"].(string); ok {
			for _, s := range supportedVersions {
				if v == s {
					return v
				}
			}
		}
	}
	return latest
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// errorAnswer is the spec's error object with exit status 1.
func errorAnswer(version string, code int, msg, details string) (int, []byte) {
	out, _ := json.Marshal(map[string]interface{}{
		"cniVersion": version, "code": code, "msg": msg, "details": details})
	return 1, out
}
