"""Hypothesis strategies for CNI requests, shared by the fuzz drill and the
in-process property tests (``tests/unit/test_fuzz_protocol.py``).

Why hand-made shapes and not only random bytes: random bytes die in the JSON
decoder; the interesting bugs sit behind it, in requests that are *almost*
right (a valid netconf with one odd field, an env with one bad variable).
So most cases are built from a valid request by mutating some fields, with
values picked among the edge cases of each field.

Safety: no strategy ever produces a path to a real network namespace unless
the caller passes one (``real_netns``), so a fuzzed ADD never plumbs into
the host's namespace; netconfs always carry a ``daemon_socket`` the caller
chose, so the shim never dials anything but our daemon or a dead address.
"""
from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from kuryr_supervisor.cni.protocol import COMMANDS, SUPPORTED_VERSIONS

CNI_KEYS = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME",
            "CNI_ARGS", "CNI_PATH")
ODD_TEXT = ["", " ", "\x00", "\n", "é", "\udcff", "\u202e", "%s", "{}",
            "null", "../../etc/passwd", "a" * 300, "\t\r\n"]

json_scalars = (st.none() | st.booleans() | st.integers()
                | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(max_size=30) | st.sampled_from(ODD_TEXT))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)


def odd(*good: str) -> st.SearchStrategy[str]:
    """Mostly ``good`` values, else edge cases or any text."""
    fine = st.sampled_from(good)
    return st.one_of(fine, fine, fine, fine, st.sampled_from(ODD_TEXT),
                     st.text(max_size=40))


commands = odd(*COMMANDS, "add", "FROB")
versions = st.one_of(st.sampled_from([*SUPPORTED_VERSIONS, "0.1.0", "0.2.0",
                                      "1.1", "2.0.0"]), json_values)
valid_ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,40}\Z")
container_ids = st.one_of(
    valid_ids, valid_ids, valid_ids,
    st.sampled_from(["-x", ".x", "a" * 250, "a" * 251, "a/b", "a b", "ksvx"]),
    st.text(max_size=20))
ifnames = st.one_of(st.sampled_from(["eth0", "net1", "a" * 15]),
                    st.sampled_from(["eth0", "net1", "a" * 15, "a" * 16, ".",
                                     "..", "a/b", "a:b", "a b", "\x7f"]),
                    st.text(max_size=20))
dead_paths = st.sampled_from([
    "/var/run/netns/ksvx-does-not-exist", "/etc/hostname", "/dev/null",
    "/proc/self/ns/uts", "/tmp", "relative/path", "/", "/proc/self/ns",
    "/var/run/netns/\x00x"]) | st.text(max_size=40).map(lambda t: "/" + t)
cni_args = st.one_of(
    st.sampled_from(["", "K8S_POD_NAME=p;K8S_POD_NAMESPACE=n", "=x", "x",
                     "IgnoreUnknown=1;;", "K8S_POD_NAME="]),
    st.text(max_size=40))


def envs(real_netns: list[str] | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """CNI_* dicts: valid-looking keys with odd values, missing keys,
    unknown keys and, rarely, non-string values."""
    netns = st.sampled_from(real_netns) | dead_paths if real_netns else dead_paths
    base = st.fixed_dictionaries({"CNI_COMMAND": commands,
                                  "CNI_CONTAINERID": container_ids,
                                  "CNI_IFNAME": ifnames,
                                  "CNI_NETNS": netns}, optional={
        "CNI_ARGS": cni_args,
        "CNI_PATH": st.just("/opt/cni/bin")})
    sparse = st.fixed_dictionaries({"CNI_COMMAND": commands}, optional={
        "CNI_CONTAINERID": container_ids, "CNI_IFNAME": ifnames})
    extra = st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=2)
    weird = st.dictionaries(st.sampled_from(CNI_KEYS), json_values, max_size=3)
    full = st.builds(lambda b, e: {**e, **b}, base, extra)
    return st.one_of(full, full, full, full, full, sparse, weird)


def attachments() -> st.SearchStrategy[Any]:
    entry = st.fixed_dictionaries({"containerID": container_ids,
                                   "ifname": ifnames}) | json_values
    return st.lists(entry, max_size=3) | json_values


def netconfs(daemon_socket: st.SearchStrategy[str] | None = None
             ) -> st.SearchStrategy[dict[str, Any]]:
    """Network configurations: required keys mostly right, optional keys
    of any shape. With ``daemon_socket``, always that key (for the shim)."""
    required: dict[str, st.SearchStrategy[Any]] = {
        "cniVersion": st.sampled_from(SUPPORTED_VERSIONS) | versions, "name": odd("kuryr", "k8s-pod-network"),
        "type": st.just("kuryr-cni")}
    if daemon_socket is not None:
        required["daemon_socket"] = daemon_socket
    objects = st.dictionaries(st.text(max_size=10), json_values, max_size=3)
    maybe_object = st.one_of(objects, objects, objects, json_values)
    optional = {"ipam": maybe_object, "dns": maybe_object, "args": maybe_object,
                "runtimeConfig": maybe_object, "prevResult": maybe_object,
                "cni.dev/valid-attachments": attachments(),
                "timeout": st.sampled_from([0.5, 5, 0, -1, "5", True, None, 1e300,
                                             float("inf")]),
                "mtu": json_values}
    return st.fixed_dictionaries(required, optional=optional)


def request_bodies(real_netns: list[str] | None = None
                   ) -> st.SearchStrategy[bytes]:
    """Request bodies for ``POST /cni``: mostly structured, some junk."""
    configs = st.one_of(netconfs(), netconfs(), netconfs(), json_values)
    structured = st.fixed_dictionaries({"env": envs(real_netns),
                                        "config": configs})
    loose = st.dictionaries(st.sampled_from(["config", "x"]), json_values)
    as_json = st.one_of(structured, structured, structured, structured,
                        structured, loose, json_values
                        ).map(lambda v: json.dumps(v).encode())
    deep = st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n)
    return st.one_of(as_json, as_json, as_json, as_json, as_json,
                     st.binary(max_size=200), deep)


def shim_inputs(daemon_sockets: list[str], real_netns: list[str] | None = None
                ) -> st.SearchStrategy[tuple[dict[str, str], str]]:
    """(environ, stdin) for the shim. stdin is a netconf naming one of
    ``daemon_sockets``, or text that is not a JSON object (the shim then
    never dials its default socket, where a real daemon may listen)."""
    def not_object(text: str) -> bool:
        if not text.strip():    # blank stdin is an empty netconf: the default
            return False        # socket would be dialled (and waited for)
        try:
            return not isinstance(json.loads(text), dict)
        except (ValueError, RecursionError):
            return True
    environ = envs(real_netns).map(
        lambda e: {str(k): str(v) for k, v in e.items()}) | st.builds(
        lambda e, t: {**e, "TRACEPARENT": t}, st.just({"CNI_COMMAND": "DEL"}),
        st.text(max_size=60))
    conf = netconfs(st.sampled_from(daemon_sockets)).map(json.dumps)
    deep = st.integers(1, 5000).map(lambda n: "[" * n + "]" * n)
    junk = (st.text(max_size=60) | json_values.map(json.dumps) | deep
            ).filter(not_object)
    return st.tuples(environ, st.one_of(conf, conf, conf, junk))
