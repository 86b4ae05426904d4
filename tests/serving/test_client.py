"""Waiting for a server: it returns once /v1/models answers, and gives up with the reason."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from pettingllms_rllib.serving.client import wait_until_serving


class _Models(BaseHTTPRequestHandler):
    """Answers 503 (still loading) to the first GET of /v1/models, 200 after; 404 elsewhere.
    Every path asked for is kept in ``paths``."""

    paths: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.paths.append(self.path)
        loaded = self.paths.count("/v1/models") > 1
        self.send_response((200 if loaded else 503) if self.path == "/v1/models" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_it_returns_once_the_models_route_answers():
    handler = type("_Fresh", (_Models,), {"paths": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        returned = wait_until_serving(f"http://127.0.0.1:{server.server_port}", timeout_s=10)
        waited = time.monotonic() - start
    finally:
        server.shutdown()
    # it asked the models route until it answered 200 (a 503 is not serving yet), then stopped
    assert returned is None and handler.paths == ["/v1/models", "/v1/models"]
    assert waited < 9  # one retry (about a second apart), not the whole timeout


def test_it_gives_up_at_the_timeout_or_at_once_when_the_server_exited():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TimeoutError, match="within 2 s"):
        wait_until_serving(f"http://127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(TimeoutError, match="the server exited"):
        wait_until_serving(f"http://127.0.0.1:{port}", timeout_s=600, alive=lambda: False)
