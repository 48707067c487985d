"""The write fence of a replica that leads through a Lease: a process
whose lease lapsed exits at its next PodPort or Neutron write, before the
request is sent; a client built without one (an open fence) writes."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=60)


def test_open_fence_allows_and_lapsed_lease_exits_before_sending() -> None:
    done = run("""
        import http.server, threading, logging
        logging.basicConfig()
        from kuryr_supervisor.kubernetes.client import K8sClient
        from kuryr_supervisor.kubernetes.fence import WriteFence
        seen = []
        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                seen.append(self.path)
                self.send_response(201); self.send_header("Content-Length", "2")
                self.end_headers(); self.wfile.write(b"{}")
            def log_message(self, *a): pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        from oslo_config import cfg
        from kuryr_supervisor.conf import kubernetes
        conf = cfg.ConfigOpts()
        kubernetes.register_opts(conf)
        conf([], default_config_files=[])
        conf.set_override("api_root", f"http://127.0.0.1:{srv.server_port}",
                          "kubernetes")
        obj = {"metadata": {"name": "p"}, "spec": {}}
        WriteFence().check("an open fence")
        K8sClient.from_conf(conf).podports.create(obj, namespace="ns")   # open: sent
        leading = [True]
        client = K8sClient.from_conf(conf, fence=WriteFence(lambda: leading[0]))
        client.podports.create(obj, namespace="ns")          # leading: sent
        print("sent", len(seen), flush=True)
        leading[0] = False                         # the lease lapsed
        client.podports.create(obj, namespace="ns")
        print("not reached", flush=True)
    """)
    assert done.returncode == 1, done
    assert "sent 2" in done.stdout and "not reached" not in done.stdout
    assert "no longer holds the controller lease" in done.stderr


def test_neutron_writes_fenced_reads_not(tmp_path: object) -> None:
    done = run("""
        import logging, pathlib, tempfile
        logging.basicConfig()
        from kuryr_supervisor.controller.openstack import adapter as osa
        from kuryr_supervisor.kubernetes.fence import WriteFence
        from tests.fixtures.openstack import FakeKeystone, FakeNeutron
        from tests.unit.test_openstack import neutron_conf
        keystone = FakeKeystone().start()
        neutron = FakeNeutron(keystone).start()
        api = osa.OpenStack.from_conf(neutron_conf(
            pathlib.Path(tempfile.mkdtemp()), keystone),
            fence=WriteFence(lambda: False))
        print("read", api.ports_of("x"), flush=True)   # reads go through
        try:
            api.create_port(network_id=neutron.network_id, subnet_id="",
                            name="p", device_id="x")
        finally:
            print("posted", neutron.counts()["POST /v2.0/ports"], flush=True)
    """)
    assert done.returncode == 1, done
    assert "read []" in done.stdout and "posted" not in done.stdout
    assert "no longer holds the controller lease" in done.stderr


def test_a_lease_lapsed_between_the_check_and_the_send_sends_nothing() -> None:
    """The call's own check passes, then the process pauses past its lease
    (here: the next check fails) before the request's first byte: the
    PodPort write never reaches the server, while a read on the same
    client still does."""
    done = run("""
        import http.server, threading, logging
        logging.basicConfig()
        from kuryr_supervisor.kubernetes.client import K8sClient
        from kuryr_supervisor.kubernetes.fence import WriteFence
        seen = []
        class H(http.server.BaseHTTPRequestHandler):
            def answer(self):
                seen.append((self.command, self.path))
                self.send_response(201); self.send_header("Content-Length", "2")
                self.end_headers(); self.wfile.write(b"{}")
            do_POST = do_GET = answer
            def log_message(self, *a): pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        from tests.fixtures.fakeapi import kubernetes_conf
        conf = kubernetes_conf(api_root=f"http://127.0.0.1:{srv.server_port}")
        checks = []
        def leading():
            checks.append(1)
            return len(checks) == 1       # the call's check only
        client = K8sClient.from_conf(conf, fence=WriteFence(leading))
        client.probe()                    # a read: never fenced
        print("read", len(seen), flush=True)
        client.podports.create({"metadata": {"name": "p"}, "spec": {}}, namespace="ns")
        print("not reached", flush=True)
    """)
    assert done.returncode == 1, done
    assert "read 1" in done.stdout and "not reached" not in done.stdout, done
    assert "a write to the Kubernetes API refused" in done.stderr, done


def test_nodenetwork_writes_fenced_reads_not() -> None:
    """The judge's verdicts and the canaries' assignments steer every
    node's STATUS and probes: a replica whose lease lapsed sends no
    NodeNetwork write (spec or status), while it still reads them."""
    done = run("""
        import http.server, threading, logging
        logging.basicConfig()
        from kuryr_supervisor.kubernetes.client import K8sClient
        from kuryr_supervisor.kubernetes.fence import WriteFence
        seen = []
        class H(http.server.BaseHTTPRequestHandler):
            def answer(self):
                size = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(size)
                seen.append((self.command, self.path))
                self.send_response(200); self.send_header("Content-Length", "2")
                self.end_headers(); self.wfile.write(b"{}")
            do_PUT = do_GET = answer
            def log_message(self, *a): pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        from tests.fixtures.fakeapi import kubernetes_conf
        conf = kubernetes_conf(api_root=f"http://127.0.0.1:{srv.server_port}")
        leading = [True]
        client = K8sClient.from_conf(conf, fence=WriteFence(lambda: leading[0]))
        body = {"metadata": {"name": "n1"}, "spec": {"nodeName": "n1"}}
        client.nodenetworks.replace("n1", body)        # leading: sent
        leading[0] = False                             # the lease lapsed
        client.nodenetworks.get("n1")                   # a read: sent
        print("sent", len(seen), flush=True)
        client.nodenetworks.replace("n1", body)
        print("not reached", flush=True)
    """)
    assert done.returncode == 1, done
    assert "sent 2" in done.stdout and "not reached" not in done.stdout, done
    assert "no longer holds the controller lease" in done.stderr, done
