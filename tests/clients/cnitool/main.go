// Command cnitool drives CNI plugins the way a container runtime does: through
// Debian's libcni (golang-github-appc-cni-dev, 1.1.x), the library containerd
// 1.6/1.7 and podman 4 vendor. Everything the tests want to prove about
// version negotiation, result parsing and caching is libcni's own code; this
// file only turns a command line into one libcni call.
//
//	cnitool add|check|del NETWORK NETNS
//
// Environment: NETCONFPATH (conflist directory, default /etc/cni/net.d),
// CNI_PATH (plugin directories), CNI_IFNAME (default eth0), CNI_ARGS
// ("K=V;K=V"), CAP_ARGS (JSON object), CNI_CACHE_DIR (libcni's result cache,
// default /var/lib/cni) and CNI_CONTAINERID (default: derived from NETNS).
// ADD prints the result; any failure prints libcni's error and exits 1.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// cniArgs splits "K=V;K=V" into the pairs libcni passes on as CNI_ARGS.
func cniArgs(raw string) ([][2]string, error) {
	var pairs [][2]string
	if raw == "" {
		return pairs, nil
	}
	for _, item := range strings.Split(raw, ";") {
		key, value, ok := strings.Cut(item, "=")
		if !ok || key == "" || value == "" {
			return nil, fmt.Errorf("CNI_ARGS: %q is not KEY=VALUE", item)
		}
		pairs = append(pairs, [2]string{key, value})
	}
	return pairs, nil
}

func runtimeConf(netns string) (*libcni.RuntimeConf, error) {
	path, err := filepath.Abs(netns)
	if err != nil {
		return nil, err
	}
	args, err := cniArgs(os.Getenv("CNI_ARGS"))
	if err != nil {
		return nil, err
	}
	var caps map[string]interface{}
	if raw := os.Getenv("CAP_ARGS"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &caps); err != nil {
			return nil, fmt.Errorf("CAP_ARGS: %w", err)
		}
	}
	digest := sha256.Sum256([]byte(path))
	return &libcni.RuntimeConf{
		ContainerID:    envOr("CNI_CONTAINERID", "cnitool-"+hex.EncodeToString(digest[:10])),
		NetNS:          path,
		IfName:         envOr("CNI_IFNAME", "eth0"),
		Args:           args,
		CapabilityArgs: caps,
	}, nil
}

func run(command, network, netns string) error {
	list, err := libcni.LoadConfList(envOr("NETCONFPATH", "/etc/cni/net.d"), network)
	if err != nil {
		return err
	}
	rt, err := runtimeConf(netns)
	if err != nil {
		return err
	}
	cni := libcni.NewCNIConfigWithCacheDir(
		filepath.SplitList(os.Getenv("CNI_PATH")), os.Getenv("CNI_CACHE_DIR"), nil)
	ctx := context.Background()
	switch command {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		return result.Print()
	case "check":
		return cni.CheckNetworkList(ctx, list, rt)
	case "del":
		return cni.DelNetworkList(ctx, list, rt)
	}
	return errors.New("usage: cnitool add|check|del NETWORK NETNS")
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: cnitool add|check|del NETWORK NETNS")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
