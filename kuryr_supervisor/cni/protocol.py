"""The CNI protocol: request parsing and validation (results: ``results``).

Role: turn the shim's ``{"env": {...}, "config": {...}}`` into a
:class:`Request` whose every field has been checked, and answer VERSION.

Invariants:
- nothing here touches netlink or the allocation store; the only file-system
  access is the ``CNI_NETNS`` check (a path that must be a network
  namespace), which is :mod:`.netns`'s (its :func:`is_netns` and
  :func:`host_netns_guard` stay importable from here);
- a container id or ifname that passes :func:`parse` is safe to use as a path
  component and as a Linux interface name;
- every rejection is a :class:`~kuryr_supervisor.errors.CNIError` carrying its
  spec code; nothing raises anything else for any input.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from kuryr_supervisor import errors
from kuryr_supervisor.cni import netns
from kuryr_supervisor.cni.ipam import PodRef
from kuryr_supervisor.cni.netns import (  # noqa: F401 - re-exported
    host_netns_guard,
    is_netns,
)

SUPPORTED_VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST = SUPPORTED_VERSIONS[-1]
#: Top-level cniVersion of the conflists we ship and install: the newest that
#: every runtime in the field can parse a result of (libcni before 1.2, in
#: containerd 1.6/1.7 and podman 4, refuses a 1.1.0 result and ignores
#: ``cniVersions``); newer runtimes pick from ``cniVersions``.
CONFLIST_VERSION = "1.0.0"
COMMANDS = ("ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION")
#: First spec version that knows each command.
_SINCE = {"CHECK": "0.4.0", "STATUS": "1.1.0", "GC": "1.1.0"}
_ATTACHMENT_COMMANDS = ("ADD", "DEL", "CHECK")

# The spec: "Must start with an alphanumeric character, optionally followed
# by any combination of one or more alphanumeric characters, underscore (_),
# dot (.) or hyphen (-)." The length cap keeps "<id>.lock" a valid file name.
_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,249}")
_NETWORK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_IFNAME_MAX = 15


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@dataclasses.dataclass(frozen=True)
class Attachment:
    """A (container id, ifname) pair named by GC's valid-attachments."""

    container_id: str
    ifname: str


@dataclasses.dataclass(frozen=True)
class Request:
    """One validated CNI invocation."""

    command: str
    cni_version: str
    netconf: dict[str, Any]
    container_id: str = ""
    ifname: str = ""
    netns: str = ""            # "" when not given (allowed for DEL only)
    args: Mapping[str, str] = dataclasses.field(default_factory=dict)
    prev_result: dict[str, Any] | None = None
    valid_attachments: frozenset[Attachment] = frozenset()

    @property
    def pod(self) -> PodRef | None:
        """The Kubernetes pod from CNI_ARGS, when the runtime passed one."""
        name = self.args.get("K8S_POD_NAME", "")
        if not name:
            return None
        return PodRef(namespace=self.args.get("K8S_POD_NAMESPACE", ""),
                      name=name, uid=self.args.get("K8S_POD_UID", ""))

    @property
    def dns(self) -> dict[str, Any]:
        raw = self.netconf.get("dns")
        if not isinstance(raw, dict):
            return {}
        return {k: raw[k] for k in ("nameservers", "domain", "search", "options")
                if k in raw}


def version_of(config: Any) -> str:
    """The cniVersion to answer in, even for a request that fails to parse."""
    if isinstance(config, dict):
        version = config.get("cniVersion")
        if isinstance(version, str) and version in SUPPORTED_VERSIONS:
            return version
    return LATEST


def version_answer(config: Any) -> dict[str, Any]:
    """The VERSION result; answered without validating anything else."""
    return {"cniVersion": version_of(config),
            "supportedVersions": list(SUPPORTED_VERSIONS)}


def parse(body: Any) -> Request:
    """Validate one request body from the shim (already JSON-decoded)."""
    if not isinstance(body, dict):
        raise errors.DecodeError("request must be a JSON object")
    env, config = body.get("env"), body.get("config")
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise errors.DecodeError('"env" must be an object of strings')
    if not isinstance(config, dict):
        raise errors.DecodeError('"config" must be the network configuration '
                                 'object')
    for key, value in env.items():
        if not _is_utf8(key) or not _is_utf8(value):
            raise errors.InvalidEnvironment(
                f"{key.encode('utf-8', 'replace').decode()} is not valid "
                "UTF-8")
    if not _is_utf8(config):
        raise errors.DecodeError("network configuration is not valid UTF-8")
    command = env.get("CNI_COMMAND", "")
    if command not in COMMANDS:
        raise errors.InvalidEnvironment(
            f"CNI_COMMAND {command!r} is not one of {', '.join(COMMANDS)}")
    version = _check_netconf(config, command)
    if command == "VERSION":
        return Request(command=command, cni_version=version, netconf=config)
    if command not in _ATTACHMENT_COMMANDS:
        return Request(command=command, cni_version=version, netconf=config,
                       valid_attachments=_attachments(config)
                       if command == "GC" else frozenset())
    container_id = _container_id(env.get("CNI_CONTAINERID", ""))
    ifname = _ifname(env.get("CNI_IFNAME", ""))
    path = netns.checked(env.get("CNI_NETNS", ""), required=command != "DEL")
    prev = config.get("prevResult")
    if prev is not None and not isinstance(prev, dict):
        raise errors.InvalidConfig('"prevResult" must be an object')
    if command == "CHECK" and prev is None:
        raise errors.InvalidConfig("CHECK needs prevResult")
    return Request(command=command, cni_version=version, netconf=config,
                   container_id=container_id, ifname=ifname, netns=path,
                   args=_cni_args(env.get("CNI_ARGS", "")), prev_result=prev)


def _check_netconf(config: dict[str, Any], command: str) -> str:
    version = config.get("cniVersion")
    if command == "VERSION":
        return version_of(config)
    if not isinstance(version, str) or version not in SUPPORTED_VERSIONS:
        raise errors.IncompatibleVersion(
            f"cniVersion {version!r} is not supported",
            f"supported: {', '.join(SUPPORTED_VERSIONS)}")
    since = _SINCE.get(command)
    if since and version_key(version) < version_key(since):
        raise errors.IncompatibleVersion(
            f"{command} needs cniVersion {since} or later, got {version}")
    name = config.get("name")
    if not isinstance(name, str) or not _NETWORK_NAME.fullmatch(name):
        raise errors.InvalidConfig(f"network name {name!r} is invalid")
    for key in ("ipam", "dns", "args", "runtimeConfig"):
        if key in config and not isinstance(config[key], dict):
            raise errors.InvalidConfig(f'"{key}" must be an object')
    return version


def _container_id(value: str) -> str:
    if not value:
        raise errors.InvalidEnvironment("CNI_CONTAINERID is missing")
    if not _CONTAINER_ID.fullmatch(value):
        raise errors.InvalidEnvironment(
            "CNI_CONTAINERID is invalid",
            "must start with an alphanumeric character followed by "
            "alphanumerics, '_', '.' or '-' (at most 250 characters)")
    return value


def _ifname(value: str) -> str:
    """The kernel's ``dev_valid_name`` (1-15 bytes, not '.' or '..', no '/',
    ':' or whitespace) plus no '%': the kernel expands ``eth%d`` into a free
    name, so the interface would not be called what the runtime asked for
    and netlink would fail later, counted as an internal failure."""
    if not value:
        raise errors.InvalidEnvironment("CNI_IFNAME is missing")
    if (len(value.encode("utf-8", "surrogatepass")) > _IFNAME_MAX
            or value in (".", "..")
            or any(c in "/:%" or c.isspace() for c in value)
            or not value.isprintable()):
        raise errors.InvalidEnvironment(
            f"CNI_IFNAME {value!r} is invalid",
            "must be 1-15 bytes, not '.' or '..', without '/', ':', '%' "
            "or whitespace")
    return value


def _is_utf8(value: Any) -> bool:
    """False when a string anywhere in ``value`` holds a lone surrogate: the
    shim's encoding of a non-UTF-8 byte in the environment, which would
    fail later in SQLite or a log line as an internal error."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _cni_args(value: str) -> dict[str, str]:
    """CNI_ARGS: ``K=V;K=V``. Malformed pairs are the caller's error."""
    args: dict[str, str] = {}
    for pair in filter(None, value.split(";")):
        key, sep, val = pair.partition("=")
        if not sep or not key:
            raise errors.InvalidEnvironment(f"CNI_ARGS pair {pair!r} is not K=V")
        args[key] = val
    return args


def _attachments(config: dict[str, Any]) -> frozenset[Attachment]:
    """GC's still-valid attachments (``cni.dev/valid-attachments``, or the
    older ``cni.dev/attachments`` some runtimes still send)."""
    raw = config.get("cni.dev/valid-attachments",
                     config.get("cni.dev/attachments", []))
    if not isinstance(raw, list):
        raise errors.InvalidConfig('"cni.dev/valid-attachments" must be a list')
    found = set()
    for entry in raw:
        if (not isinstance(entry, dict)
                or not isinstance(entry.get("containerID"), str)
                or not isinstance(entry.get("ifname"), str)):
            raise errors.InvalidConfig(
                "each valid attachment needs string containerID and ifname")
        found.add(Attachment(entry["containerID"], entry["ifname"]))
    return frozenset(found)
