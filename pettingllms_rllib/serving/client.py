"""Waiting for a team server to answer: ``serve.run`` returns once the application is
deployed, but Serve's HTTP proxy may still be starting, and a server started as a process
(``pettingllms-rllib serve``) takes a while to load its modules."""

from __future__ import annotations

import time
from typing import Callable


def wait_until_serving(url: str, *, timeout_s: float = 300,
                       alive: Callable[[], bool] | None = None) -> None:
    """Return once ``GET {url}/v1/models`` answers 200.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000``.
        timeout_s: how long to wait.
        alive: called between tries; when it returns False (the server process exited),
            waiting stops at once.

    Raises:
        TimeoutError: no answer within ``timeout_s``, or ``alive`` said the server is gone.
    """
    import requests

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (alive is None or alive()):
        try:
            if requests.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return
        except requests.RequestException:  # not listening yet, or the app still loading
            pass
        time.sleep(1)
    raise TimeoutError(f"no answer from {url}/v1/models "
                       + ("(the server exited)" if alive is not None and not alive()
                          else f"within {timeout_s:.0f} s"))
