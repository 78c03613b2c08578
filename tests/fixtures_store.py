"""Fixtures of the embedded object store (SeaweedFS's S3 gateway, ``eos.tools.object_store``)."""

from __future__ import annotations

__all__: list[str] = []
