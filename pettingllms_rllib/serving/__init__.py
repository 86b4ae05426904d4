"""Serve a trained team with Ray Serve (``pettingllms-rllib serve``, docs/serving.md).

``requests.py`` checks what clients send, ``team.py`` plays episodes and completes chats in
batches (no Ray needed), ``app.py`` is the Serve application. ``build_app`` is imported from
``app.py`` on use, so importing this package does not import Ray Serve.
"""

from __future__ import annotations

from typing import Any


def build_app(checkpoint, **kwargs: Any):
    """See :func:`pettingllms_rllib.serving.app.build_app`."""
    from pettingllms_rllib.serving.app import build_app as build

    return build(checkpoint, **kwargs)


__all__ = ["build_app"]
