package main

// What a 2xx answer must be to be passed on as a success: the twin of
// result_problem in kuryr_supervisor/cni/shim.py (the same checks, the same
// words), so that a garbled answer is error 999, never exit status 0.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ipVersioned are the result versions whose ips[] carry "version".
var ipVersioned = map[string]bool{"0.3.1": true, "0.4.0": true}

// resultProblem says why body is not a valid result of command ("" if it
// is one). Only ADD prints a result; DEL, CHECK, GC and STATUS print
// nothing on success. An ADD result is a JSON object in the request's
// cniVersion with at least one address (ips: what the runtime gives the
// pod), each in CIDR notation and pointing, if at all, into interfaces;
// interfaces, routes and dns have their spec's shapes.
func resultProblem(command string, requested interface{}, body []byte) string {
	if command != "ADD" {
		if len(body) > 0 {
			return fmt.Sprintf("%s prints nothing on success, but the answer had %d bytes", command, len(body))
		}
		return ""
	}
	if len(body) == 0 {
		return "the answer has no result"
	}
	if !utf8.Valid(body) {
		return "the result is not UTF-8"
	}
	var decoded interface{}
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.UseNumber()
	if decoder.Decode(&decoded) != nil {
		return "the result is not JSON"
	}
	if _, err := decoder.Token(); err != io.EOF {
		return "the result is not JSON"
	}
	result, ok := decoded.(map[string]interface{})
	if !ok {
		return "the result is not a JSON object"
	}
	version, ok := result["cniVersion"].(string)
	if !ok {
		return "the result has no cniVersion"
	}
	if want, isString := requested.(string); !isString || version != want {
		if !isString {
			want = "none"
		}
		return fmt.Sprintf("the result's cniVersion %s is not the request's %s", version, want)
	}
	var interfaces []interface{}
	if raw := result["interfaces"]; raw != nil {
		if interfaces, ok = raw.([]interface{}); !ok || !allHave(interfaces, "name") {
			return "interfaces must be a list of objects with a name"
		}
	}
	ips, ok := result["ips"].([]interface{})
	if !ok || len(ips) == 0 {
		return "the result has no ips (an ADD gives the pod an address)"
	}
	for n, raw := range ips {
		ip, _ := raw.(map[string]interface{})
		address, _ := ip["address"].(string)
		if !strings.Contains(address, "/") {
			return fmt.Sprintf("ips[%d] has no address in CIDR notation", n)
		}
		if index := ip["interface"]; index != nil {
			number, isNumber := index.(json.Number)
			i, err := strconv.Atoi(string(number))
			if !isNumber || err != nil || i < 0 || i >= len(interfaces) {
				return fmt.Sprintf("ips[%d].interface is not an index into interfaces", n)
			}
		}
		if ipVersioned[version] {
			if v, _ := ip["version"].(string); v != "4" && v != "6" {
				return fmt.Sprintf("ips[%d].version must be \"4\" or \"6\" in %s", n, version)
			}
		}
	}
	if raw := result["routes"]; raw != nil {
		if routes, ok := raw.([]interface{}); !ok || !allHave(routes, "dst") {
			return "routes must be a list of objects with a dst"
		}
	}
	if raw := result["dns"]; raw != nil {
		if _, ok := raw.(map[string]interface{}); !ok {
			return "dns must be an object"
		}
	}
	return ""
}

// allHave: every item is an object with a string under key.
func allHave(items []interface{}, key string) bool {
	for _, item := range items {
		object, ok := item.(map[string]interface{})
		if !ok {
			return false
		}
		if _, ok := object[key].(string); !ok {
			return false
		}
	}
	return true
}
