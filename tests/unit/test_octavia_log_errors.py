"""The Octavia fixture tells a real error in its logs from the word
``ERROR`` in the configuration dump that Octavia logs at every start."""
from __future__ import annotations

import re

from tests.fixtures.realcloud.octavia import error_lines, unexpected

#: Lines as Octavia 19 (oslo.log), gunicorn and Python write them.
HEALTHY = """\
2026-11-29 04:43:10.629 2630 INFO octavia.api.app [-] logging_exception_prefix = %(asctime)s.%(msecs)03d %(process)d ERROR %(name)s %(instance)s
2026-11-29 04:43:10.630 2630 INFO octavia.api.app [-] default_log_levels = ['amqp=WARN', 'oslo.messaging=ERROR', 'urllib3.connectionpool=WARN']
2026-11-29 04:43:16.017 2630 WARNING keystonemiddleware.auth_token [None req-8] Using the in-process token cache is deprecated
[2026-11-29 04:43:08 +0000] [2511] [INFO] Starting gunicorn 27.0.1
127.0.0.1 - - [29/Nov/2026:04:43:17 +0000] "POST /v2/lbaas/loadbalancers HTTP/1.1" 201 764 "-" "-"
"""
ERRORS = [
    "2026-11-29 04:45:33.620 27282 ERROR ovsdbapp.backend.ovs_idl.idlutils "
    "[-] Unable to open stream to unix:/tmp/x/ovnnb.sock",
    "2026-11-29 04:45:33.621 27282 CRITICAL octavia [-] Unhandled error",
    "[2026-11-29 04:43:08 +0000] [2511] [ERROR] Exception in worker process",
    "Traceback (most recent call last):",
]


def test_the_config_dump_is_no_error() -> None:
    assert error_lines(HEALTHY) == []


def test_real_errors_are_found_among_healthy_lines() -> None:
    text = HEALTHY + "\n".join(ERRORS) + "\n" + HEALTHY
    assert error_lines(text) == ERRORS


def test_an_error_a_test_provoked_is_left_out_with_its_traceback() -> None:
    """A VIP asked twice on purpose: the provider logs Neutron's refusal,
    a traceback under the same request; any other error still counts."""
    req = "req-17b24bcb-0000-4000-8000-08e7e00aca04"
    provoked = [
        f"2026-11-29 06:43:39.769 17703 ERROR ovn_octavia_provider.helper "
        f"[None {req} - - - - -] Conflict: IP address 10.43.0.233 already "
        f"allocated in subnet 2368c34d",
        f"2026-11-29 06:43:39.770 17703 ERROR ovn_octavia_provider.helper "
        f"[None {req} - - - - -] Traceback (most recent call last):"]
    lines = provoked + ERRORS
    assert unexpected(lines, [re.compile(
        r"IP address 10\.43\.0\.233 already allocated")]) == ERRORS
    assert unexpected(lines, []) == lines
